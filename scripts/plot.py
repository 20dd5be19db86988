#!/usr/bin/python3
"""Figures like the Three-Chains paper's from tc-bench results.

    scripts/plot.py [-o OUTDIR] FILE...

Each FILE is tc-bench output, either --json (an array of records) or --csv
(header bench,mode,metric,value,unit,transport,servers,depth,payload_bytes).
Records from all files are pooled; a point measured more than once (same
bench, mode, metric, transport, servers, depth, payload) is plotted as the
mean. Writes PNGs into OUTDIR (default .) and prints each path written:

  dapc-rate-vs-depth.png       chases/s over depth (log x), a line per mode;
                               one figure per server count, named
                               dapc-rate-vs-depth-Sservers.png when the
                               input has several server counts
  dapc-hop-latency-vs-depth... the same for hop_latency_us, if present
  dapc-rate-vs-servers.png     chases/s over server count at the largest
                               depth (only with two or more server counts)
  sss-latency-vs-payload.png   latency over payload bytes (log x), a line per
  sss-rate-vs-payload.png      mode; rate likewise when rate_msgs is present
  iput-latency-vs-payload.png  (the same for iput)
  iput-rate-vs-payload.png
  tsi-latency.png, tsi-rate.png  bars per mode
  tsi-first-contact.png        first contact and JIT time per mode, if present
  tsi-breakdown.png            send calls, one way and return per mode (tsi
                               --breakdown), if present

Only figures whose data is present are made. Lines and bars are split by
transport when the input has more than one. Uses matplotlib from Debian's
python3-matplotlib (hence /usr/bin/python3) with the Agg backend.
"""
import argparse
import csv
import io
import json
import math
import os
import sys
from collections import defaultdict

BENCHES = ("tsi", "dapc", "sss", "iput")
PARAMS = ("transport", "servers", "depth", "payload_bytes")
CSV_HEADER = ("bench", "mode", "metric", "value", "unit") + PARAMS


class InputError(Exception):
    """A problem with one input file; the message names the file."""


def fail(msg):
    print("plot.py: error: %s" % msg, file=sys.stderr)
    sys.exit(1)


# --- Reading -----------------------------------------------------------------

def _int_param(value, where, key):
    if value is None or value == "":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError("%s: %s is not a number: %r" % (where, key, value))
    if not math.isfinite(f) or f != int(f):
        raise InputError("%s: %s is not an integer: %r" % (where, key, value))
    return int(f)


def _record(raw, where):
    """A normalized record, or None if `raw` is not a tc-bench record."""
    if not isinstance(raw, dict):
        return None
    bench, mode, metric = raw.get("bench"), raw.get("mode"), raw.get("metric")
    if bench not in BENCHES or not isinstance(mode, str) or not mode \
            or not isinstance(metric, str) or not metric:
        return None
    value = raw.get("value")
    if isinstance(value, bool):
        raise InputError("%s: value is not a number: %r" % (where, value))
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InputError("%s: value is not a number: %r" % (where, value))
    if not math.isfinite(value):
        return None  # nothing to draw
    transport = raw.get("transport") or None
    if transport is not None and not isinstance(transport, str):
        raise InputError("%s: transport is not a string: %r"
                         % (where, transport))
    return {
        "bench": bench, "mode": mode, "metric": metric, "value": value,
        "unit": str(raw.get("unit") or ""), "transport": transport,
        "servers": _int_param(raw.get("servers"), where, "servers"),
        "depth": _int_param(raw.get("depth"), where, "depth"),
        "payload_bytes": _int_param(raw.get("payload_bytes"), where,
                                    "payload_bytes"),
    }


def _read_json(path, text):
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError("%s:%d: malformed JSON: %s" % (path, e.lineno, e.msg))
    if not isinstance(data, list):
        raise InputError("%s: malformed JSON: expected an array of records"
                         % path)
    out = []
    for i, raw in enumerate(data):
        r = _record(raw, "%s: record %d" % (path, i + 1))
        if r:
            out.append(r)
    return out


def _read_csv(path, text):
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        rows = list(reader)
    except csv.Error as e:
        raise InputError("%s:%d: malformed CSV: %s"
                         % (path, reader.line_num, e))
    rows = [(n + 1, row) for n, row in enumerate(rows) if row]
    if not rows:
        return []
    header = [h.strip() for h in rows[0][1]]
    missing = [k for k in CSV_HEADER[:4] if k not in header]
    if missing:
        raise InputError("%s:%d: malformed CSV: header lacks %s (expected %s)"
                         % (path, rows[0][0], ", ".join(missing),
                            ",".join(CSV_HEADER)))
    out = []
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise InputError("%s:%d: malformed CSV: %d fields, header has %d"
                             % (path, line, len(row), len(header)))
        r = _record(dict(zip(header, (c.strip() for c in row))),
                    "%s:%d" % (path, line))
        if r:
            out.append(r)
    return out


def read_records(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError("%s: cannot read: %s"
                         % (path, getattr(e, "strerror", None) or e))
    stripped = text.lstrip()
    if stripped.startswith("[") or stripped.startswith("{"):
        records = _read_json(path, text)
    else:
        records = _read_csv(path, text)
    if not records:
        raise InputError("%s: no tc-bench records" % path)
    return records


def pool(records):
    """Averages repeated measurements of the same point."""
    sums = defaultdict(lambda: [0.0, 0, ""])
    for r in records:
        key = tuple(r[k] for k in ("bench", "mode", "metric") + PARAMS)
        s = sums[key]
        s[0] += r["value"]
        s[1] += 1
        s[2] = s[2] or r["unit"]
    keys = ("bench", "mode", "metric") + PARAMS
    out = []
    for key, (total, n, unit) in sums.items():
        r = dict(zip(keys, key))
        r["value"], r["unit"] = total / n, unit
        out.append(r)
    return out


# --- Drawing -----------------------------------------------------------------

# Modes appear in the order tc-bench printed them (first input first).
METRIC_LABELS = {"first_contact_ms": "first contact", "jit_ms": "JIT or load",
                 "send_call_ns": "send call", "one_way_ns": "one way",
                 "target_send_call_ns": "target's send call",
                 "return_ns": "return"}
# tc-bench tsi --breakdown's rows, in the order of a round trip.
BREAKDOWN = ("send_call_ns", "one_way_ns", "target_send_call_ns", "return_ns")


def size_label(v):
    for div, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if v >= div and v % div == 0:
            return "%d%s" % (v // div, suffix)
    return str(v)


def series_label(mode, transport, split_transport):
    return "%s (%s)" % (mode, transport) if split_transport and transport \
        else mode


def unit_of(records, metric):
    units = {r["unit"] for r in records if r["metric"] == metric and r["unit"]}
    return units.pop() if len(units) == 1 else ""


class Plotter:
    def __init__(self, outdir):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        self.plt = plt
        self.outdir = outdir
        self.written = []

    def save(self, fig, name):
        os.makedirs(self.outdir, exist_ok=True)
        path = os.path.join(self.outdir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        self.plt.close(fig)
        self.written.append(path)
        print(path)

    def lines(self, records, x, name, title, xlabel, ylabel, logx=True):
        """One line per (mode, transport) of `records`, over key `x`."""
        from matplotlib.ticker import EngFormatter, NullLocator
        split = len({r["transport"] for r in records}) > 1
        series = defaultdict(dict)
        for r in records:
            if r[x] is not None:
                series[(r["mode"], r["transport"] or "")][r[x]] = r["value"]
        if not series:
            return
        fig, ax = self.plt.subplots(figsize=(6.4, 4.4))
        # A colour per mode, a line style per transport.
        colours = self.plt.rcParams["axes.prop_cycle"].by_key()["color"]
        modes = list(dict.fromkeys(m for m, _ in series))
        trs = sorted({tr for _, tr in series})
        ys = []
        for (mode, tr) in series:
            pts = sorted(series[(mode, tr)].items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts],
                    marker="os^D"[trs.index(tr) % 4],
                    linestyle=("-", "--", ":", "-.")[trs.index(tr) % 4],
                    color=colours[modes.index(mode) % len(colours)],
                    label=series_label(mode, tr, split))
            ys += [p[1] for p in pts]
        xs = {r[x] for r in records if r[x] is not None}
        if logx and min(xs) > 0 and (len(xs) > 2 or max(xs) / min(xs) >= 10):
            ax.set_xscale("log", base=2 if x == "servers" else 10)
        if min(ys) > 0 and max(ys) / min(ys) >= 50:
            ax.set_yscale("log")
        if len(xs) <= 12:  # label the measured points themselves
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(sorted(xs))
            ax.set_xticklabels([size_label(v) if x == "payload_bytes"
                                else str(v) for v in sorted(xs)])
        if ylabel.startswith(("chase rate", "message rate")):
            ax.yaxis.set_major_formatter(EngFormatter())
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8 if len(series) > 4 else None)
        self.save(fig, name)

    def bars(self, records, metrics, name, title, ylabel):
        """Bars per mode; grouped by metric (and transport) when several."""
        from matplotlib.ticker import EngFormatter
        eng = EngFormatter() if ylabel.startswith("message rate") else None
        groups = []  # (label, metric, transport)
        transports = sorted({r["transport"] or "" for r in records})
        for metric in metrics:
            for tr in transports:
                if any(r["metric"] == metric and (r["transport"] or "") == tr
                       for r in records):
                    label = " ".join(p for p in (
                        METRIC_LABELS.get(metric, metric)
                        if len(metrics) > 1 else "",
                        tr if len(transports) > 1 else "") if p)
                    groups.append((label, metric, tr))
        if not groups:
            return
        modes = list(dict.fromkeys(r["mode"] for r in records
                                   if r["metric"] in metrics))
        value = {(r["mode"], r["metric"], r["transport"] or ""): r["value"]
                 for r in records}
        fig, ax = self.plt.subplots(figsize=(max(6.4, 1.1 * len(modes) *
                                                 max(1, len(groups) / 2)),
                                             4.4))
        width = 0.8 / len(groups)
        for g, (label, metric, tr) in enumerate(groups):
            xs, hs = [], []
            for m, mode in enumerate(modes):
                v = value.get((mode, metric, tr))
                if v is not None:
                    xs.append(m - 0.4 + width * (g + 0.5))
                    hs.append(v)
            bars = ax.bar(xs, hs, width, label=label or None)
            ax.bar_label(bars, fontsize=7, padding=2,
                         labels=[EngFormatter(places=1).format_eng(h)
                                 if eng else "%.3g" % h for h in hs])
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels(modes, rotation=20 if len(modes) > 5 else 0)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        if eng:
            ax.yaxis.set_major_formatter(eng)
        ax.margins(y=0.12)
        ax.grid(True, axis="y", alpha=0.3)
        if any(g[0] for g in groups):
            ax.legend()
        self.save(fig, name)


def select(records, bench, metric):
    return [r for r in records if r["bench"] == bench and r["metric"] == metric]


def plot_dapc(p, records):
    for metric, tag, what in (("rate_chases", "rate", "chase rate"),
                              ("hop_latency_us", "hop-latency",
                               "hop latency")):
        rs = [r for r in select(records, "dapc", metric)
              if r["depth"] is not None]
        if not rs:
            continue
        ylabel = "%s (%s)" % (what, unit_of(rs, metric) or metric)
        counts = sorted({r["servers"] for r in rs},
                        key=lambda n: -1 if n is None else n)
        for s in counts:
            sub = [r for r in rs if r["servers"] == s]
            suffix = "-%dservers" % s if len(counts) > 1 and s is not None \
                else ""
            title = "DAPC %s over depth" % what
            if s is not None:
                title += " (%d servers)" % s
            p.lines(sub, "depth", "dapc-%s-vs-depth%s.png" % (tag, suffix),
                    title, "chase depth (hops)", ylabel)
        if metric != "rate_chases":
            continue
        by_servers = defaultdict(set)
        for r in rs:
            if r["servers"] is not None:
                by_servers[r["servers"]].add(r["depth"])
        if len(by_servers) < 2:
            continue
        # The largest depth measured at every server count, else the largest.
        common = set.intersection(*by_servers.values())
        depth = max(common) if common else max(set.union(*by_servers.values()))
        sub = [r for r in rs if r["depth"] == depth and r["servers"] is not None]
        p.lines(sub, "servers", "dapc-%s-vs-servers.png" % tag,
                "DAPC %s over server count (depth %d)" % (what, depth),
                "servers", ylabel)


def plot_payload(p, records, bench):
    for metric, tag, what in (("latency_us", "latency", "latency"),
                              ("rate_msgs", "rate", "message rate")):
        rs = [r for r in select(records, bench, metric)
              if r["payload_bytes"] is not None]
        if rs:
            p.lines(rs, "payload_bytes",
                    "%s-%s-vs-payload.png" % (bench, tag),
                    "%s %s over payload size" % (bench.upper(), what),
                    "payload (bytes)",
                    "%s (%s)" % (what, unit_of(rs, metric) or metric))


def plot_tsi(p, records):
    for metric, tag, what in (("latency_us", "latency", "latency"),
                              ("rate_msgs", "rate", "message rate")):
        rs = select(records, "tsi", metric)
        if rs:
            p.bars(rs, [metric], "tsi-%s.png" % tag,
                   "TSI %s per mode" % what,
                   "%s (%s)" % (what, unit_of(rs, metric) or metric))
    rs = [r for r in records if r["bench"] == "tsi"
          and r["metric"] in ("first_contact_ms", "jit_ms")]
    if rs:
        metrics = [m for m in ("first_contact_ms", "jit_ms")
                   if any(r["metric"] == m for r in rs)]
        p.bars(rs, metrics, "tsi-first-contact.png",
               "TSI first contact per mode", "time (ms)")
    rs = [r for r in records if r["bench"] == "tsi" and r["metric"] in BREAKDOWN]
    if rs:
        metrics = [m for m in BREAKDOWN if any(r["metric"] == m for r in rs)]
        p.bars(rs, metrics, "tsi-breakdown.png",
               "TSI ping-pong: where a round trip's time goes", "time (ns)")


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="plot.py",
        description="Plot tc-bench --json/--csv results as PNG figures.")
    ap.add_argument("-o", "--outdir", default=".",
                    help="directory for the PNGs (default: .)")
    ap.add_argument("files", nargs="+", metavar="FILE",
                    help="tc-bench --json or --csv output")
    args = ap.parse_args(argv)

    records = []
    for path in args.files:
        try:
            records += read_records(path)
        except InputError as e:
            fail(str(e))
    records = pool(records)

    try:
        p = Plotter(args.outdir)
    except ImportError as e:
        fail("matplotlib is missing (%s); install python3-matplotlib and run "
             "with /usr/bin/python3" % e)
    try:
        plot_dapc(p, records)
        plot_payload(p, records, "sss")
        plot_payload(p, records, "iput")
        plot_tsi(p, records)
    except OSError as e:
        fail("%s: %s" % (getattr(e, "filename", None) or args.outdir,
                         e.strerror or e))
    if not p.written:
        print("plot.py: nothing to plot (no latency, rate or depth/payload "
              "series in the input)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
