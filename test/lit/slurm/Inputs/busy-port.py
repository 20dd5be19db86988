"""busy-port.py CMD [ARGS...]: runs CMD while this script holds a TCP port
(listening on every address), each {port} in ARGS replaced by that port and
{port-1} by the one below it; exits with CMD's status. For the tests of a
daemon that cannot have its port."""
import socket
import subprocess
import sys

s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("0.0.0.0", 0))
s.listen(1)
port = s.getsockname()[1]
args = [a.replace("{port}", str(port)).replace("{port-1}", str(port - 1))
        for a in sys.argv[1:]]
print("busy port: %d" % port, flush=True)
sys.exit(subprocess.run(args, timeout=300).returncode)
