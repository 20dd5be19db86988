"""Real TCP between the "hosts" of a netns.sh hosts file ($TC_HOSTS_FILE).

Prints the hosts file, then sends a line from the first namespace to a
listener in the second, and from the second to a listener on the client
address in the root namespace. Each listener prints what it received and
the sender's address (which proves the bytes crossed the veths). Every step
has a timeout; any failure exits non-zero with a message.
"""
import os
import select
import subprocess
import sys

TIMEOUT = 10

# Listens on ADDR:0, says "ready PORT", accepts one connection, reads to EOF.
LISTENER = r"""
import socket, sys
srv = socket.create_server((sys.argv[1], 0))
srv.settimeout(%d)
print("ready", srv.getsockname()[1], flush=True)
conn, peer = srv.accept()
conn.settimeout(%d)
data = b""
while True:
    chunk = conn.recv(4096)
    if not chunk:
        break
    data += chunk
print("got %%r from %%s" %% (data.decode(), peer[0]), flush=True)
""" % (TIMEOUT, TIMEOUT)

# Connects to ADDR PORT and sends TEXT.
CLIENT = r"""
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=%d) as s:
    s.sendall(sys.argv[3].encode())
""" % TIMEOUT


def inside(ns):
    return ["ip", "netns", "exec", ns] if ns else []


def send(listen_ns, listen_addr, client_ns):
    listener = subprocess.Popen(
        inside(listen_ns) + [sys.executable, "-c", LISTENER, listen_addr],
        stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([listener.stdout], [], [], TIMEOUT)
        line = listener.stdout.readline().split() if ready else []
        if len(line) != 2 or line[0] != "ready":
            sys.exit("netns-tcp: no listener in %s on %s"
                     % (listen_ns or "root", listen_addr))
        print("%s listening on %s" % (listen_ns or "root", listen_addr))
        subprocess.run(
            inside(client_ns) + [sys.executable, "-c", CLIENT, listen_addr,
                                 line[1], "hello from %s" % client_ns],
            check=True, timeout=TIMEOUT)
        out, _ = listener.communicate(timeout=TIMEOUT)
        if listener.returncode != 0:
            sys.exit("netns-tcp: listener in %s failed" % (listen_ns or "root"))
        print("%s %s" % (listen_ns or "root", out.strip()))
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


def main():
    path = os.environ.get("TC_HOSTS_FILE")
    if not path:
        sys.exit("netns-tcp: TC_HOSTS_FILE is not set")
    client, hosts = None, []
    with open(path) as f:
        text = f.read()
    print("hosts file %s" % path)
    sys.stdout.write(text)
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["client"]:
            client = words[1]
        elif words[:1] == ["netns"]:
            hosts.append((words[1], words[2]))
    if client is None or len(hosts) < 2:
        sys.exit("netns-tcp: need a client and two netns hosts in %s" % path)
    sys.stdout.flush()
    (ns0, _), (ns1, addr1) = hosts[0], hosts[1]
    send(ns1, addr1, ns0)
    sys.stdout.flush()
    send(None, client, ns1)


if __name__ == "__main__":
    main()
