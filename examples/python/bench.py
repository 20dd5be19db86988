"""The Python package's performance figures (issue #42's targets), each
next to its reference measured in the same run, against one tc-serve:

  1. ifunc speed: a sum over a SIZE-byte payload (examples/sss) written
     in Python (tc.cc) and in C (tc-cc): per message sent to tc-serve
     (where moving the payload dominates), and the two members' code
     alone, compiled as the target's JIT compiles it and called in this
     process; the target: Python >= 0.8x C's speed.
  2. send rate: ep.send(f, args, count=N) against tc-send --count N (the
     same C TSI archive; tc-send's start-up taken out by a run with
     --count 1); target >= 0.9x.
  3. a Python loop of single ep.send() calls; target >= 300,000 msgs/s.
  4. send + flush round trip against tc-roundtrip (the same in C);
     target <= 1.5x C's time.
  5. RSS over a million single sends after a warm-up; target: within
     5 MiB.

    python3 examples/python/bench.py [--quick] [--rounds R] [--size BYTES]

Run with the package on the path (PYTHONPATH=build/python). The figures
are printed, never judged by exit status (docs/benchmarks.md, "Python").
"""
import argparse
import ctypes
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

import tc
from tc import _config

def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    """tc-serve on a free loopback port, ended by PID."""

    def __init__(self, bindir):
        self.p = subprocess.Popen(
            [os.path.join(bindir, "tc-serve"), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        end = time.monotonic() + 60
        for line in self.p.stdout:
            m = re.search(r"listening on (\S+)", line)
            if m:
                self.addr = m.group(1)
                return
            if time.monotonic() > end:
                break
        self.stop()
        sys.exit("bench.py: error: tc-serve did not start")

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def per_message(ep, f, args, count):
    """Seconds per message of `count` sends of f(args), flush included."""
    t = time.perf_counter()
    ep.send(f, args, count=count)
    ep.flush(timeout=600)
    return (time.perf_counter() - t) / count


def time_members(archives, words, tmp, rounds, bindir):
    """Microseconds one call of each archive's sss_main takes on `words`:
    its x86_64 target member compiled as a target's JIT compiles it (LLVM
    22's code generator at -O2 for this CPU), linked into a shared object
    and called through ctypes; the fastest of `rounds` batches, the
    archives' batches interleaved."""
    llvm = "/usr/lib/llvm-22/bin"
    host = "x86_64-unknown-linux-gnu"
    fns = []
    for k, archive in enumerate(archives):
        path = archive
        if isinstance(archive, bytes):
            path = os.path.join(tmp, f"member{k}.tcfb")
            with open(path, "wb") as f:
                f.write(archive)
        bc, obj, so = (os.path.join(tmp, f"member{k}{x}")
                       for x in (".bc", ".o", ".so"))
        subprocess.run([os.path.join(bindir, "tc-ar"), "extract", path,
                        f"--target={host}", "-o", bc], check=True)
        subprocess.run([os.path.join(llvm, "llc"), "-O2", "-mcpu=native",
                        "-relocation-model=pic", "-filetype=obj", bc, "-o",
                        obj], check=True)
        subprocess.run([os.path.join(llvm, "clang"), "-shared", obj, "-o",
                        so], check=True)
        fn = ctypes.CDLL(so).sss_main
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        fn.restype = None
        fns.append(fn)
    state = np.zeros(2, dtype=np.uint64)
    calls = max(10, (64 << 20) // words.nbytes)
    best = [float("inf")] * len(fns)
    for _ in range(max(3, rounds)):
        for k, fn in enumerate(fns):
            state[:] = 0
            t = time.perf_counter()
            for _ in range(calls):
                fn(words.ctypes.data, words.nbytes, state.ctypes.data)
            best[k] = min(best[k], (time.perf_counter() - t) / calls * 1e6)
            want = (int(words.sum()) * calls) % (1 << 64)
            if (int(state[0]), int(state[1])) != (calls, want):
                sys.exit(f"bench.py: error: member {k}'s sum is wrong")
    return best


def verdict(ok):
    return "met" if ok else "MISSED"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes and one round (a smoke test)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=1 << 20,
                    help="the sum's payload bytes (default 1 MiB)")
    a = ap.parse_args()
    bindir = os.path.dirname(_config.tc_cc())
    ifuncs = os.path.join(os.path.dirname(bindir), "ifuncs")
    here = os.path.dirname(os.path.abspath(__file__))
    if a.quick:
        a.rounds, a.size = 1, 64 << 10
        sum_msgs, rate_n, loop_n, rtt_n, rss_n = 20, 20000, 20000, 200, 20000
    else:
        sum_msgs, rate_n, loop_n, rtt_n = 200, 2000000, 1000000, 20000
        rss_n = 1000000
    sum_msgs = max(1, min(sum_msgs, (256 << 20) // a.size))

    tmp = tempfile.mkdtemp(prefix="tc-py-bench.")
    py_sss = tc.compile(os.path.join(here, "sss.py"))
    server = Server(bindir)
    tls = os.environ.get("UCX_TLS", "(UCX's default)")
    print(f"bench.py: tc-serve at {server.addr}, UCX_TLS={tls}, "
          f"{a.rounds} round(s){', --quick' if a.quick else ''}")
    try:
        with tc.Worker() as w, w.connect(server.addr) as ep:
            c_sum = w.register(os.path.join(ifuncs, "sss.tcfb"))
            p_sum = w.register(py_sss)
            tsi = w.register(os.path.join(ifuncs, "tsi.tcfb"))

            # 1. The sum: end to end on the target (the 1 MiB transfer
            # dominates), then the two members' code alone, made as the
            # target's JIT makes it.
            words = np.arange(1, a.size // 8 + 1, dtype=np.uint64)
            for f in (c_sum, p_sum):  # code shipped, JIT warm
                per_message(ep, f, words, 2)
            c_us, p_us = [], []
            for r in range(a.rounds):
                for f, out in ((c_sum, c_us), (p_sum, p_us))[::(-1) ** r]:
                    out.append(per_message(ep, f, words, sum_msgs) * 1e6)
            count, total = struct.unpack("<QQ", ep.read_region(16))
            want_n = 4 + 2 * a.rounds * sum_msgs
            want = (int(words.sum()) * want_n) % (1 << 64)
            if (count, total) != (want_n, want):
                sys.exit(f"bench.py: error: the sums are wrong: {count} "
                         f"messages summing {total}, expected {want_n} "
                         f"and {want}")
            c_code, p_code = time_members(
                [os.path.join(ifuncs, "sss.tcfb"), py_sss], words, tmp,
                a.rounds, bindir)
            speed = c_code / p_code
            print(f"1. sum over {a.size:,} bytes (examples/sss), median of "
                  f"{a.rounds}:")
            print(f"   on tc-serve, per message sent: C (tc-cc) "
                  f"{statistics.median(c_us):.1f} us, Python (tc.cc) "
                  f"{statistics.median(p_us):.1f} us; every sum exact")
            print(f"   the members' sss_main alone (llc -O2 -mcpu=native, as "
                  f"the target's JIT): C {c_code:.1f} us, Python "
                  f"{p_code:.1f} us: Python at {speed:.2f}x C's speed "
                  f"(target >= 0.8x: {verdict(speed >= 0.8)})")

            # 2. count= against tc-send.
            send = os.path.join(bindir, "tc-send")
            arch = os.path.join(ifuncs, "tsi.tcfb")

            def tc_send(n):
                t = time.perf_counter()
                subprocess.run([send, "--to", server.addr, arch, "--count",
                                str(n)], check=True, stdout=subprocess.DEVNULL)
                return time.perf_counter() - t

            py_rates, c_rates = [], []
            per_message(ep, tsi, b"\x01", 1000)
            for _ in range(a.rounds):
                py_rates.append(1 / per_message(ep, tsi, b"\x01", rate_n))
                # tc-send's own time for the messages: its run less a run
                # of one message (start-up, connection, first contact).
                spent = tc_send(rate_n) - tc_send(1)
                if spent > 0:
                    c_rates.append((rate_n - 1) / spent)
            py_rate = statistics.median(py_rates)
            if c_rates:
                c_rate = statistics.median(c_rates)
                ratio = py_rate / c_rate
                versus = (f"tc-send --count {rate_n:,}: {c_rate / 1e6:.2f} M "
                          f"msgs/s: {ratio:.2f}x (target >= 0.9x: "
                          f"{verdict(ratio >= 0.9)})")
            else:
                versus = (f"tc-send --count {rate_n:,}: too short to time "
                          f"beside its start-up (target >= 0.9x: MISSED)")
            print(f"2. ep.send(f, args, count={rate_n:,}): "
                  f"{py_rate / 1e6:.2f} M msgs/s; {versus}")

            # 3. A Python loop of single sends.
            rates = []
            for _ in range(a.rounds):
                t = time.perf_counter()
                for _ in range(loop_n):
                    ep.send(tsi, b"\x01")
                ep.flush(timeout=600)
                rates.append(loop_n / (time.perf_counter() - t))
            rate = statistics.median(rates)
            print(f"3. a Python loop of {loop_n:,} single ep.send(f, args): "
                  f"{rate:,.0f} msgs/s (target >= 300,000: "
                  f"{verdict(rate >= 300000)})")

            # 4. send + flush round trip, against C.
            rtt = os.path.join(bindir, "tc-roundtrip")
            py_rtt, c_rtt = [], []
            for _ in range(a.rounds):
                for _ in range(100):
                    ep.send(tsi, b"\x01")
                    ep.flush()
                t = time.perf_counter()
                for _ in range(rtt_n):
                    ep.send(tsi, b"\x01")
                    ep.flush()
                py_rtt.append((time.perf_counter() - t) / rtt_n * 1e6)
                out = subprocess.run([rtt, server.addr, arch, str(rtt_n),
                                      "01"], check=True, text=True,
                                     stdout=subprocess.PIPE).stdout
                c_rtt.append(float(out.split()[1]))
            ratio = statistics.median(p / c for p, c in zip(py_rtt, c_rtt))
            print(f"4. send + flush round trip: Python "
                  f"{statistics.median(py_rtt):.1f} us, C (tc-roundtrip) "
                  f"{statistics.median(c_rtt):.1f} us: {ratio:.2f}x "
                  f"(target <= 1.5x: {verdict(ratio <= 1.5)})")

            # 5. RSS over many single sends.
            step = max(1, rss_n // 10)
            for _ in range(step):
                ep.send(tsi, b"\x01")
            ep.flush(timeout=600)
            base = rss_kib()
            peak = base
            for _ in range(10):
                for _ in range(step):
                    ep.send(tsi, b"\x01")
                ep.flush(timeout=600)
                peak = max(peak, rss_kib())
            grew = (peak - base) / 1024
            print(f"5. RSS over {10 * step:,} single sends after "
                  f"{step:,} to warm up: {base / 1024:.1f} MiB, at most "
                  f"+{grew:.2f} MiB (target within 5 MiB: "
                  f"{verdict(grew <= 5)})")
    finally:
        server.stop()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
