#!/usr/bin/env python3
"""Run tc-serve (or any server that prints 'listening on HOST:PORT'), then a
client shell command with $TC_ADDR set to that address (and $TC_SERVER_PID
to the server's PID, for tests that kill it), then stop the server
with SIGTERM and print what it printed. Bounded in time; the server is always
ended by PID and reaped.

usage: with-server.py [--ready-timeout S] [--timeout S] -- SERVER... -- CLIENT
The exit status is the client's; the server's output follows the client's,
each server line prefixed with 'server: '."""
import os
import re
import signal
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    ready_timeout, timeout = 30.0, 120.0
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt == "--ready-timeout":
            ready_timeout = float(args.pop(0))
        elif opt == "--timeout":
            timeout = float(args.pop(0))
        else:
            sys.exit("with-server.py: unknown option %s" % opt)
    if "--" not in args[1:]:
        sys.exit("with-server.py: usage: [opts] -- SERVER... -- CLIENT")
    args = args[1:]
    split = args.index("--")
    server_cmd, client = args[:split], " ".join(args[split + 1:])

    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    lines = []
    addr = None
    deadline = time.monotonic() + ready_timeout
    try:
        # Read the raw fd, not a buffered file: a buffered reader may pull
        # several lines at once and leave select() waiting for more.
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(server.stdout, selectors.EVENT_READ)
        pending = b""
        while addr is None:
            if b"\n" not in pending:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    print("with-server.py: server not ready in %gs"
                          % ready_timeout)
                    return 1
                chunk = os.read(server.stdout.fileno(), 65536)
                if not chunk:
                    print("with-server.py: server exited early:\n"
                          + "".join(lines) + pending.decode(errors="replace"))
                    return 1
                pending += chunk
                continue
            raw, pending = pending.split(b"\n", 1)
            line = raw.decode(errors="replace") + "\n"
            lines.append(line)
            m = re.search(r"listening on (\S+:\d+)", line)
            if m:
                addr = m.group(1)
        lines.append(pending.decode(errors="replace"))
        env = dict(os.environ, TC_ADDR=addr, TC_SERVER_PID=str(server.pid))
        try:
            rc = subprocess.run(client, shell=True, env=env,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            print("with-server.py: client timed out after %gs" % timeout)
            rc = 1
        sys.stdout.flush()
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        try:
            out, _ = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            out, _ = server.communicate()
        lines.append((out or b"").decode(errors="replace"))
    for line in "".join(lines).splitlines():
        print("server: " + line)
    print("server: exit %d" % server.returncode)
    return rc


if __name__ == "__main__":
    sys.exit(main())
