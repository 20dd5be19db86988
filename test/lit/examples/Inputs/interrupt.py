#!/usr/bin/env python3
"""Start a command, wait (bounded) until its stderr has a line matching
PATTERN, note the processes it started, send it SIGINT, wait (bounded) for it
to exit, then report its exit status and whether every process it started is
gone.

usage: interrupt.py PATTERN -- COMMAND..."""
import os
import re
import selectors
import signal
import subprocess
import sys
import time


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def main():
    pattern = re.compile(sys.argv[1])
    cmd = sys.argv[sys.argv.index("--") + 1:]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    pending = b""
    seen = False
    while not seen:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            proc.kill()
            proc.wait()
            print("interrupt.py: no line matching %r in 60 s" % sys.argv[1])
            return 1
        chunk = os.read(proc.stderr.fileno(), 65536)
        if not chunk:
            print("interrupt.py: the command exited first")
            return 1
        pending += chunk
        seen = any(pattern.search(l.decode(errors="replace"))
                   for l in pending.split(b"\n"))
    started = children(proc.pid)
    proc.send_signal(signal.SIGINT)
    rest = b""
    try:
        _, rest = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print("interrupt.py: still running 30 s after SIGINT")
        return 1
    text = (pending + (rest or b"")).decode(errors="replace")
    for line in text.splitlines():
        if "error" in line:
            print(line)
    left = [p for p in started if alive(p)]
    print("exit %d, started %d processes, %d left"
          % (proc.returncode, len(started), len(left)))
    for p in left:
        os.kill(p, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
