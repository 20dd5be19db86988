"""Starts a GPU target (SERVER, which prints 'listening on HOST:PORT' and,
with -v, its worker's pid), starts CLIENT with $TC_ADDR set, waits until a
kernel runs, then sends the target SIGTERM and says whether it ended within
a second and whether its worker went with it. A kernel runs when file NOTE
is not empty (the driver model writes it), or, given 'line:REGEX', when the
server has printed a line that matches (on a real GPU: the kernel's load,
its launch follows). The client is ended by PID; everything is bounded in
time.

usage: sigterm.py NOTE|line:REGEX -- SERVER... -- CLIENT"""
import os
import re
import selectors
import signal
import subprocess
import sys
import time


def main():
    note, args = sys.argv[1], sys.argv[3:]
    split = args.index("--")
    server_cmd, client = args[:split], " ".join(args[split + 1:])
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    sel = selectors.DefaultSelector()
    sel.register(server.stdout, selectors.EVENT_READ)
    out, addr, worker = b"", None, None
    deadline = time.monotonic() + 30
    while addr is None:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            print("sigterm.py: the server did not listen")
            server.kill()
            return 1
        chunk = os.read(server.stdout.fileno(), 65536)
        if not chunk:
            print("sigterm.py: the server ended:\n" + out.decode())
            return 1
        out += chunk
        text = out.decode(errors="replace")
        m = re.search(r"worker pid (\d+) ready", text)
        if m:
            worker = int(m.group(1))
        m = re.search(r"listening on (\S+:\d+)", text)
        if m:
            addr = m.group(1)
    client_proc = subprocess.Popen(client, shell=True,
                                   env=dict(os.environ, TC_ADDR=addr),
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30

        def running():
            if note.startswith("line:"):
                return re.search(note[5:], out.decode(errors="replace"))
            return os.path.exists(note) and os.path.getsize(note) > 0

        while not running():
            left = deadline - time.monotonic()
            if left <= 0:
                print("sigterm.py: no kernel ran")
                return 1
            if note.startswith("line:"):
                if sel.select(min(left, 0.5)):
                    out += os.read(server.stdout.fileno(), 65536)
            else:
                time.sleep(0.01)
        print("a kernel runs")
        t0 = time.monotonic()
        server.send_signal(signal.SIGTERM)
        try:
            rest, _ = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            rest, _ = server.communicate()
            print("sigterm.py: the server did not end within 10 s")
        took = time.monotonic() - t0
        out += rest or b""
        print("server ended %s, exit %d" % (
            "within a second" if took < 1.0 else "after %.1f s" % took,
            server.returncode))
        gone = False
        deadline = time.monotonic() + 2
        while worker and time.monotonic() < deadline:
            try:
                with open("/proc/%d/stat" % worker) as f:
                    if f.read().split(") ")[1].startswith("Z"):
                        gone = True
                        break
            except OSError:
                gone = True
                break
            time.sleep(0.01)
        print("worker %s" % ("gone" if gone else "still running"))
    finally:
        if client_proc.poll() is None:
            client_proc.kill()
        client_proc.wait()
        if server.poll() is None:
            server.kill()
            server.wait()
    for line in out.decode(errors="replace").splitlines():
        print("server: " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
