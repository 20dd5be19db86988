"""Checks tc-bench tsi --breakdown's CSV (argv[1]): every mode that has a
latency has the four breakdown rows, all positive, and its stamped round
trip (one_way_ns + return_ns, means without the slowest 1 %) is not longer
than the measured one (2 x latency_us, the mean of all): stamps converted
with a wrong clock rate fail it. (tc-bench itself dies when the stamps are
not matched to their round trips or do not span the time it measured.)"""
import csv
import sys

rows = {}
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        rows[(r["mode"], r["metric"])] = float(r["value"])
modes = sorted({m for (m, metric) in rows if metric == "latency_us"})
if not modes:
    sys.exit("no latency rows")
for m in modes:
    parts = [rows.get((m, k)) for k in
             ("send_call_ns", "one_way_ns", "target_send_call_ns", "return_ns")]
    if any(p is None or p <= 0 for p in parts):
        sys.exit("%s: breakdown rows missing or not positive: %s" % (m, parts))
    stamped = parts[1] + parts[3]
    measured = 2 * rows[(m, "latency_us")] * 1000
    if stamped > 1.05 * measured:
        sys.exit("%s: stamped round trip %.1f ns, measured %.1f ns" %
                 (m, stamped, measured))
    print("%s: ok" % m)
