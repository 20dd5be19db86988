#!/usr/bin/env python3
"""Failure scenarios between tc-send and a tc-serve that stops, dies, closes
or comes back, each on its own: the target is started, the scenario happens
to it, and what the sender said and did is printed as facts for FileCheck.
Every process started here is ended by PID and reaped, whatever happens
(a stopped one is continued first); each wait is bounded.

usage: scenario.py TOOLS_DIR ARCHIVE WORKDIR SCENARIO [--count N]
  stopped     the target is SIGSTOPped before the sender connects (--count
              messages queue), or with --mid while it streams; the sender
              times out (--timeout 1000)
  killed      the same, SIGKILL instead of a timeout: the sender hears of
              the loss
  closed      the target is ended (SIGTERM) with --count messages queued
              for it (it was stopped), or with --mid while the sender
              streams
  data        SIGKILL mid-stream with --region-file: what the sender was
              told against what ran (read from the file while the target
              is stopped), then a restart on the same port at once with
              the same file, and 1000 more messages counted exactly once
  restart     --rounds R: a target killed mid-stream and restarted on its
              port at once, R times
"""
import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

ARGS = None
STARTED = []  # Popen of every process started, ended at exit.


def tool(name):
    return os.path.join(ARGS.tools, name)


def fail(msg):
    print("scenario.py: error: " + msg)
    sys.exit(1)


def start_target(port=0, region=None):
    """tc-serve on 127.0.0.1:port; returns (process, port) once it listens
    (the first line it prints: it must not fail to listen)."""
    cmd = [tool("tc-serve"), "--listen", "127.0.0.1:%d" % port,
           "--no-prewarm"]
    if region:
        cmd += ["--region-file", region]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    STARTED.append(p)
    line = p.stdout.readline().decode(errors="replace").strip()
    m = re.search(r"listening on \S+:(\d+)$", line)
    if not m:
        fail("tc-serve did not listen: %r" % line)
    return p, int(m.group(1))


def start_sender(port, count, timeout_ms=20000):
    p = subprocess.Popen(
        [tool("tc-send"), "--to", "127.0.0.1:%d" % port, ARGS.archive,
         "--count", str(count), "--timeout", str(timeout_ms)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    STARTED.append(p)
    return p


def finish(p, limit=30):
    """Waits for a sender (bounded); returns (exit, stderr lines, seconds)."""
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        fail("the sender did not end within %d s" % limit)
    return (p.returncode, err.decode(errors="replace").splitlines(),
            time.monotonic() - t0)


def report(name, code, lines):
    """The sender's exit status and every line it wrote to stderr."""
    print("%s: exit %d, %d line(s)" % (name, code, len(lines)))
    for l in lines:
        print("%s: %s" % (name, l))


def region(path):
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def wait_until(cond, what, limit=20):
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            fail("timed out waiting for " + what)
        time.sleep(0.005)


def stopped(pid):
    """Whether the process is stopped (state T in /proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def kill_target(p, sig=signal.SIGKILL):
    p.send_signal(sig)
    if sig == signal.SIGSTOP:
        # Once it is stopped it runs nothing more.
        wait_until(lambda: stopped(p.pid), "the target to stop")
    else:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("the target did not end")


def acked(lines):
    """(acknowledged, maybe ran, never sent) from the sender's line."""
    text = "\n".join(lines)
    m = re.search(r": (\d+) of (\d+) messages were not acknowledged", text)
    if not m:
        return None
    total, lost = int(m.group(2)), int(m.group(1))
    first = re.search(r"the first (\d+) ran", text)
    maybe = re.search(r"(\d+) may have run or not", text)
    unsent = re.search(r"(\d+) (?:was|were) never sent", text)
    a = int(first.group(1)) if first else 0
    if a != total - lost:
        fail("'the first %d ran' with %d of %d lost" % (a, lost, total))
    return (a, int(maybe.group(1)) if maybe else 0,
            int(unsent.group(1)) if unsent else 0)


def streaming(target, port, region_file, timeout_ms=5000):
    """A sender streaming to the target, once the target has run some.

    Past 20,000 messages the target has answered a few of tc-send's fences
    (one every 4,096), which the sender has mostly read by the time it
    hears of the failure: its line then says "the first N ran". A sender
    slow to read them (a sanitizer's build on a busy machine) may not have,
    so the tests take that part as optional."""
    base = region(region_file)
    s = start_sender(port, 10**9, timeout_ms)
    wait_until(lambda: region(region_file) > base + 20000,
               "the stream to start")
    return s


def scenario_stopped_or_killed(kill):
    rf = os.path.join(ARGS.work, "region")
    t, port = start_target(region=rf)
    if ARGS.mid:
        s = streaming(t, port, rf, 20000 if kill else 1000)
        kill_target(t, signal.SIGSTOP)
    else:
        kill_target(t, signal.SIGSTOP)
        s = start_sender(port, ARGS.count, timeout_ms=1000 if not kill
                         else 20000)
        # The messages queue in the sender (the target does not answer).
        time.sleep(0.3)
    if kill:
        kill_target(t, signal.SIGKILL)
    code, lines, secs = finish(s)
    report("sender", code, lines)
    if not kill:
        print("ended within 5 s of its timeout: %s" %
              ("yes" if secs < 6 else "no (%.1f s)" % secs))
        t.send_signal(signal.SIGCONT)
        kill_target(t, signal.SIGTERM)


def scenario_closed():
    rf = os.path.join(ARGS.work, "region")
    t, port = start_target(region=rf)
    if ARGS.mid:
        s = streaming(t, port, rf)
    else:
        # Stopped, so that the messages queue; it ends once continued.
        kill_target(t, signal.SIGSTOP)
        s = start_sender(port, ARGS.count)
        time.sleep(0.3)
        t.send_signal(signal.SIGTERM)
        t.send_signal(signal.SIGCONT)
    kill_target(t, signal.SIGTERM)
    code, lines, _ = finish(s)
    report("sender", code, lines)


def scenario_data():
    rf = os.path.join(ARGS.work, "region")
    t, port = start_target(region=rf)
    s = streaming(t, port, rf)
    # Stopped, what ran is in the file and stays as it is: then killed.
    kill_target(t, signal.SIGSTOP)
    ran = region(rf)
    kill_target(t, signal.SIGKILL)
    code, lines, _ = finish(s)
    report("sender", code, lines)
    a, maybe, unsent = acked(lines) or fail("no loss report")
    # The rule: what a fence acknowledged ran; of the rest, only what may
    # have run did, and nothing the sender never sent.
    print("acknowledged <= ran: %s" % ("yes" if a <= ran else
                                       "no (%d > %d)" % (a, ran)))
    print("ran <= acknowledged + may have run: %s" %
          ("yes" if ran <= a + maybe else
           "no (%d > %d + %d)" % (ran, a, maybe)))
    # Back at once on the same port, with the same region.
    t2, port2 = start_target(port, rf)
    print("restarted on the same port: %s" % ("yes" if port2 == port
                                              else "no"))
    print("the region kept what ran: %s" %
          ("yes" if region(rf) == ran else "no"))
    s2 = start_sender(port, 1000)
    code2, lines2, _ = finish(s2)
    report("second sender", code2, lines2)
    after = region(rf)
    print("after 1000 more: ran + %d" % (after - ran))
    kill_target(t2, signal.SIGTERM)


def scenario_restart():
    rf = os.path.join(ARGS.work, "region")
    t, port = start_target(region=rf)
    last = 0
    for r in range(ARGS.rounds):
        s = streaming(t, port, rf)
        kill_target(t, signal.SIGKILL)
        code, lines, _ = finish(s)
        one = code == 1 and len(lines) == 1 and acked(lines) is not None
        ran = region(rf)
        print("round %d: sender exit %d with one line: %s; count grew: %s" %
              (r + 1, code, "yes" if one else "no: %r" % lines,
               "yes" if ran > last else "no"))
        last = ran
        # At once on the same port: start_target() fails if it cannot.
        t, port2 = start_target(port, rf)
        if port2 != port:
            fail("restarted on port %d, not %d" % (port2, port))
    print("restarted on port %d at once %d times" % (port, ARGS.rounds))
    kill_target(t, signal.SIGTERM)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("tools")
    ap.add_argument("archive")
    ap.add_argument("work")
    ap.add_argument("scenario")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--mid", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ARGS = ap.parse_args()
    os.makedirs(ARGS.work, exist_ok=True)
    try:
        {"stopped": lambda: scenario_stopped_or_killed(False),
         "killed": lambda: scenario_stopped_or_killed(True),
         "closed": scenario_closed,
         "data": scenario_data,
         "restart": scenario_restart}[ARGS.scenario]()
    finally:
        for p in STARTED:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
            if p.stdout:
                p.stdout.close()
            if p.stderr:
                p.stderr.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
