"""The package's API against a real tc-serve ($TC_ADDR): sends, region
reads, message reuse, errors as exceptions, timeouts, closed objects, a
Python target worker, and the lost connection when the server dies
($TC_SERVER_PID). Prints one line per check; FileCheck reads them.

usage: api.py TSI.tcfb WSUM.tcfb TSI_AARCH64_ONLY.tcfb"""
import builtins
import os
import signal
import struct
import sys
import threading
import time

import numpy as np

import tc

tsi_path, wsum_path, a64_path = sys.argv[1:4]
addr = os.environ["TC_ADDR"]


def expect(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


with tc.Worker() as w:
    ep = w.connect(addr)
    tsi = w.register(tsi_path)
    with open(wsum_path, "rb") as f:
        wsum = w.register(f.read())          # from bytes
    print("names:", tsi.name, wsum.name)
    # TSI counts into the region's first 8 bytes.
    ep.send(tsi, count=3)
    ep.send(tsi, b"\x07")
    print("tsi count:", struct.unpack("<Q", ep.read_region(8))[0])
    # wsum: numpy arrays, bytes and memoryviews are all source args.
    pairs = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 0.5])      # 16.5
    ep.send(wsum, pairs, count=2)
    ep.send(wsum, memoryview(pairs.tobytes()))
    # A Message sent again and again, its payload changed in place.
    m = wsum.message(np.array([2.0, 0.25]))               # 0.5
    ep.send(m, count=2)
    m.payload[:] = np.array([3.0, 3.0]).tobytes()          # 9
    ep.send(m)
    ep.flush()
    n, total = struct.unpack("<Qd", ep.read_region(16))
    print(f"wsum: count {n - 4} sum {total}")             # tsi counted 4
    m.close()

    # payload_init refusing its arguments: the send raises, tc's message.
    e = expect(tc.Error, ep.send, wsum, b"\x01\x02\x03")
    print("payload:", e.status_name, "|", e)
    e = expect(tc.Error, w.register, b"not an archive")
    print("register:", e.status_name, "|", e)
    e = expect(FileNotFoundError, w.register, "no-such.tcfb")
    print("register missing file:", type(e).__name__)
    e = expect(tc.Error, w.connect, "no port here")
    print("connect:", e)

    # The target rejects what it cannot run: RemoteError at the next wait,
    # naming the ifunc; the endpoint goes on.
    a64 = w.register(a64_path)
    ep.send(a64, count=2)
    e = expect(tc.RemoteError, ep.flush)
    print(f"remote: ifunc={e.ifunc} rejections={len(e.errors)} |", e)
    ep.send(tsi)
    ep.flush()
    print("after the rejection:", struct.unpack("<Q", ep.read_region(8))[0])

    # Timeouts: nothing waits longer than it is told.
    e = expect(tc.TimeoutError, ep.flush, timeout=0)
    print("flush timeout:", isinstance(e, builtins.TimeoutError), e.status_name, "|", e)
    e = expect(tc.TimeoutError, ep.read_region, 8, timeout=0)
    print("read timeout:", e)
    t = time.monotonic()
    e = expect(tc.TimeoutError, w.wait_for, lambda: False, timeout=0.2)
    print("wait_for timeout:", e, "| bounded:", time.monotonic() - t < 5)
    ep.flush()

    # A PMIx worker outside a launcher: one error, at once.
    e = expect(tc.Error, tc.Worker, pmix=True, timeout=30)
    print("pmix outside a job:", e.status_name)

    # Context managers and closed objects.
    with w.connect(addr) as ep2:
        ep2.send(tsi)
        ep2.flush()
    e = expect(tc.Error, ep2.send, tsi)
    print("closed endpoint:", e)

    # Closing flushes what was sent since the last wait: a connection's
    # first sends wait for the peer's answer, and would be lost otherwise.
    before = struct.unpack("<Q", ep.read_region(8))[0]
    with tc.Worker() as w2:
        ep4 = w2.connect(addr)
        ep4.send(w2.register(tsi_path), count=3)
    after = struct.unpack("<Q", ep.read_region(8))[0]
    print("closing flushes:", after - before)

    # A Python target: a worker on a thread of its own, listening, with
    # target_args and a region of its own; this worker sends to it.
    region = np.zeros(2, dtype=np.uint64)
    stop = threading.Event()
    ready = []

    def target():
        with tc.Worker(target_args=region) as t:
            t.set_region(region)
            ready.append(t.listen("127.0.0.1", 0))
            t.wait_for(stop.is_set, timeout=60)

    th = threading.Thread(target=target)
    th.start()
    while not ready:
        time.sleep(0.01)
    with w.connect("127.0.0.1", ready[0]) as ep3:
        ep3.send(tsi, count=5)
        got = struct.unpack("<QQ", ep3.read_region(16))
    stop.set()
    th.join()
    print("python target:", got, int(region[0]))

    # The server dies: the next wait raises ConnectionLostError, and so
    # does every send after it, with the reason.
    os.kill(int(os.environ["TC_SERVER_PID"]), signal.SIGKILL)
    ep.send(tsi)
    e = expect(tc.ConnectionLostError, ep.flush, timeout=30)
    print("lost:", isinstance(e, builtins.ConnectionError), e.status_name, "|", e)
    for _ in range(1000):  # the disconnect may be a progress call behind
        try:
            ep.send(tsi)
        except tc.ConnectionLostError as e:
            print("send after:", e)
            break
        w.progress()
        time.sleep(0.01)
print("closed")
