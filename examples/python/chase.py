"""The DAPC pointer chase, driven from Python in an mpirun (or
srun --mpi=pmix) job: examples/mpi-chase/tc-mpi-chase.c in Python.

    mpirun -n 3 python3 chase.py [--chases C] [--depth D] [--entries E]
                                 [--ifunc-path DIR] [--timeout S]

Every rank makes a tc.Worker(pmix=True) (libtc publishes its address and
meets the other ranks in the launcher's fence), computes its shard of the
table (examples/dapc/dapc_table.h's permutation, here in numpy) and
connects to every rank by number. The chaser is the C ifunc dapc.tcfb
(examples/dapc/dapc.c): it walks the shard of the rank it lands on and
forwards itself to the next owner, through the state this script gives it
as target_args (dapc_server_t, as ctypes). The last hop sends a
dapc_result message to rank 0, whose ifunc records the end value. Rank 0
injects C chases of depth D one at a time, checks each end against the
closed-form reference and prints

    chase.py: C chases of depth D over N ranks: ok

and every rank leaves after the job-wide barrier. The archives come from
--ifunc-path, $TC_IFUNC_PATH or the build's ifuncs/ directory.
"""
import argparse
import ctypes
import os
import struct
import sys

import numpy as np

import tc

SEED = 0x7C5EED
M64 = (1 << 64) - 1


# --- the table: examples/dapc/dapc_table.h ---------------------------------

def mix64(x):
    """splitmix64's finalizer, on numpy uint64 arrays or Python ints."""
    if isinstance(x, int):
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & M64
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & M64
        return x ^ (x >> 31)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Perm:
    """The keyed permutation P of [0, n) and its inverse (a 4-round
    Feistel network restricted to [0, n) by cycle walking)."""

    def __init__(self, n, seed=SEED):
        bits = 2
        while bits < 64 and (1 << bits) < n:
            bits += 2
        self.n = n
        self.half = bits // 2
        self.mask = (1 << self.half) - 1
        self.key = [mix64((seed + 0x9E3779B97F4A7C15 * (r + 1)) & M64)
                    for r in range(4)]

    def _rounds(self, x, keys, inverse):
        h, m = np.uint64(self.half), np.uint64(self.mask)
        left, right = x >> h, x & m
        for k in keys:
            k = np.uint64(k)
            if inverse:
                left, right = right ^ (mix64(left ^ k) & m), left
            else:
                left, right = right, left ^ (mix64(right ^ k) & m)
        return (left << h) | right

    def _walk(self, x, keys, inverse):
        x = np.array(x, dtype=np.uint64, ndmin=1)
        out = self._rounds(x, keys, inverse)
        todo = out >= np.uint64(self.n)
        while todo.any():
            out[todo] = self._rounds(out[todo], keys, inverse)
            todo = out >= np.uint64(self.n)
        return out

    def perm(self, x):
        return self._walk(x, self.key, False)

    def inv(self, x):
        return self._walk(x, self.key[::-1], True)

    def next(self, i):
        k = self.inv(i) + np.uint64(1)
        k[k == np.uint64(self.n)] = 0
        return self.perm(k)

    def chase(self, start, depth):
        """Where a chase of `depth` hops from `start` ends."""
        at = (int(self.inv(start)[0]) + depth % self.n) % self.n
        return int(self.perm(at)[0])


def shard_lo(n, servers, s):
    q, r = divmod(n, servers)
    return q * s + min(s, r)


def owner(n, servers, i):
    q, r = divmod(n, servers)
    big = r * (q + 1)
    return i // (q + 1) if i < big else r + (i - big) // q


# --- what the chaser reads: examples/dapc/dapc_chase.h ----------------------

class Server(ctypes.Structure):
    """dapc_server_t: a rank's shard and whom the chaser sends to."""
    _fields_ = [("shard", ctypes.c_void_p), ("lo", ctypes.c_uint64),
                ("hi", ctypes.c_uint64), ("n", ctypes.c_uint64),
                ("servers", ctypes.c_uint32), ("self", ctypes.c_uint32),
                ("peers", ctypes.c_void_p), ("client", ctypes.c_void_p),
                ("forward", ctypes.c_void_p), ("result", ctypes.c_void_p),
                ("hops", ctypes.c_uint64)]


class Client(ctypes.Structure):
    """dapc_client_t: the results rank 0 receives."""
    _fields_ = [("done", ctypes.c_uint64), ("ends", ctypes.c_void_p),
                ("count", ctypes.c_uint64)]


def default_ifunc_path():
    # examples/python/chase.py in the source tree -> build/ifuncs.
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "ifuncs")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chases", type=int, default=100)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--entries", type=int, default=1 << 16)
    ap.add_argument("--ifunc-path", default=os.environ.get(
        "TC_IFUNC_PATH", default_ifunc_path()))
    ap.add_argument("--timeout", type=float, default=30.0)
    a = ap.parse_args()

    server = Server()
    with tc.Worker(pmix=True, target_args=server,
                   timeout=a.timeout) as w:
        rank, size = w.rank, w.size
        if a.entries < max(2, size):
            sys.exit(f"chase.py: error: --entries must be at least "
                     f"{max(2, size)}")
        p = Perm(a.entries)
        lo = shard_lo(a.entries, size, rank)
        hi = shard_lo(a.entries, size, rank + 1)
        shard = p.next(np.arange(lo, hi, dtype=np.uint64))
        peers = [w.connect_rank(r) for r in range(size)]
        peer_handles = np.array([ep.handle for ep in peers],
                                dtype=np.uint64)
        chaser = w.register(os.path.join(a.ifunc_path, "dapc.tcfb"))
        result = w.register(os.path.join(a.ifunc_path, "dapc_result.tcfb"))
        zero = struct.pack("<QQQ", 0, 1, 0)
        forward, answer = chaser.message(zero), result.message(zero)
        server.shard = shard.ctypes.data
        server.lo, server.hi, server.n = lo, hi, a.entries
        server.servers, server.self = size, rank
        server.peers = peer_handles.ctypes.data
        server.client = peers[0].handle
        server.forward, server.result = forward.handle, answer.handle
        ends = np.zeros(a.chases + 1, dtype=np.uint64)
        client = Client(0, ends.ctypes.data, len(ends))
        w.set_target_args(client, name="dapc_result")

        if rank == 0:
            for k in range(1, a.chases + 1):
                start = mix64(k) % a.entries
                ep = peers[owner(a.entries, size, start)]
                ep.send(chaser, struct.pack("<QQQ", start, a.depth, k))
                w.wait_for(lambda: client.done >= k, timeout=a.timeout)
                want = p.chase(start, a.depth)
                if int(ends[k]) != want:
                    sys.exit(f"chase.py: error: chase {k} from {start} ended "
                             f"at {int(ends[k])}, expected {want}")
        # The servers run chases from this barrier's progress until rank 0
        # enters it.
        w.barrier(timeout=a.timeout * max(1, a.chases))
        if rank == 0:
            print(f"chase.py: {a.chases} chases of depth {a.depth} over "
                  f"{size} ranks: ok", flush=True)


if __name__ == "__main__":
    main()
