"""busy-port.py CMD [ARGS...]: runs CMD while this script holds a TCP port
P (listening on every address), each {port} in ARGS replaced by P and
{port-1} by P - 1; exits with CMD's status. For the tests of a daemon that
cannot have its port: with {port} the daemon started on P fails; with
{port-1} the daemon started on P - 1 must start and the one on P fail.

So that nothing else takes P - 1 meanwhile, P is odd and in 20001-29999:
below the kernel's range for ports it hands out itself (a connect()'s local
port, a bind to port 0: net.ipv4.ip_local_port_range, 32768-60999 unless
changed), so only a program that names P - 1 can take it, and
scripts/slurm-local.sh names even slurmctld ports only when the odd port
above is free, which P is not. P - 1 is also reserved here for the
duration: bound with SO_REUSEADDR but not listening, which a daemon that
binds with SO_REUSEADDR (as slurmctld and slurmd do) may share, and
anything binding without it may not."""
import random
import socket
import subprocess
import sys


def lowest_ephemeral():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def hold():
    top = min(29999, lowest_ephemeral() - 1)
    for _ in range(1000):
        p = random.randrange(20001, top + 1, 2)
        busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        spare = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        spare.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("0.0.0.0", p))
            busy.listen(1)
            spare.bind(("0.0.0.0", p - 1))
            return p, busy, spare
        except OSError:
            busy.close()
            spare.close()
    sys.exit("busy-port.py: no free pair of ports in 20000-%d" % top)


port, busy, spare = hold()
args = [a.replace("{port}", str(port)).replace("{port-1}", str(port - 1))
        for a in sys.argv[1:]]
print("busy port: %d" % port, flush=True)
sys.exit(subprocess.run(args, timeout=300).returncode)
