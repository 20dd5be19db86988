#!/usr/bin/python3
"""The tables of docs/benchmarks.md, rendered from saved tc-bench --json output.

    scripts/bench-tables.py [--data DIR] DOC [-o OUT]
    scripts/bench-tables.py --check DOC
    scripts/bench-tables.py --data DIR --table NAME

DOC holds one pair of markers per table,

    <!-- BEGIN bench-table NAME -->
    ...
    <!-- END bench-table NAME -->

and everything between a pair is replaced by the table NAME rendered from the
files in DIR (default: DOC's directory + /bench) that scripts/bench-tables.sh
saved: per run, NAME.json (its `tc-bench ... --json` output), NAME.cmd (the
command, shown above the table) and NAME.run (tc's commit, the load average
when it began, its wall time: shown under the command); machine.json (the
machine, with the runs' total time); plots/NAME/*.png (linked below the
table, relative to DOC). The result is written back to DOC, to OUT, or to
stdout with `-o -`. The GPU table comes from runs saved on another machine
(scripts/gpu-check.sh: gpu-*.json, gpu-*.cmd, gpu-*.run, gpu-device.json);
without them it says that it has not been measured and how to fill it. The
machine line counts the runs of this machine only (not gpu-*).

--check only verifies DOC's markers: every table's pair present once, in
order, and no marker names an unknown table. --table prints the one table
NAME rendered from DIR on stdout (plots linked relative to DIR's parent).

The form of the output depends on nothing but the data: rows and columns come
in a fixed order, figures are rounded to fixed precision, a figure that is
missing is "-". Errors are one line, `bench-tables.py: error: ...`, exit 1.
Standard library only (Debian's /usr/bin/python3).
"""
import argparse
import json
import math
import os
import re
import sys


class Error(Exception):
    pass


def fail(msg):
    print("bench-tables.py: error: %s" % msg, file=sys.stderr)
    sys.exit(1)


# --- Reading ------------------------------------------------------------------

class Data:
    """The saved runs in one directory, read on first use."""

    def __init__(self, root, doc_dir):
        self.root = root
        self.doc_dir = doc_dir
        self.cache = {}

    def path(self, name):
        return os.path.join(self.root, name)

    def text(self, name):
        try:
            with open(self.path(name), encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise Error("%s: cannot read: %s" % (self.path(name), e.strerror))

    def json(self, name):
        if name not in self.cache:
            try:
                self.cache[name] = json.loads(self.text(name))
            except json.JSONDecodeError as e:
                raise Error("%s:%d: malformed JSON: %s"
                            % (self.path(name), e.lineno, e.msg))
        return self.cache[name]

    def records(self, stem):
        """The tc-bench records of STEM.json."""
        data = self.json(stem + ".json")
        if not isinstance(data, list):
            raise Error("%s: expected an array of tc-bench records"
                        % self.path(stem + ".json"))
        out = []
        for i, r in enumerate(data):
            if not isinstance(r, dict) or not isinstance(r.get("mode"), str) \
                    or not isinstance(r.get("metric"), str):
                raise Error("%s: record %d is not a tc-bench record"
                            % (self.path(stem + ".json"), i + 1))
            v = r.get("value")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Error("%s: record %d: value is not a number"
                            % (self.path(stem + ".json"), i + 1))
            out.append(r)
        if not out:
            raise Error("%s: no tc-bench records" % self.path(stem + ".json"))
        return Records(out)

    def command(self, stem):
        return " ".join(self.text(stem + ".cmd").split("\n")).strip()

    def run(self, stem):
        """How STEM ran: {commit, load, seconds}."""
        r = self.json(stem + ".run")
        if not isinstance(r, dict) or not all(
                isinstance(r.get(k), str) for k in ("commit", "load",
                                                     "seconds")):
            raise Error("%s: expected commit, load and seconds"
                        % self.path(stem + ".run"))
        try:
            return dict(r, seconds=int(r["seconds"]))
        except ValueError:
            raise Error("%s: seconds is not a number"
                        % self.path(stem + ".run"))

    def exists(self, name):
        return os.path.exists(self.path(name))

    def runs(self):
        """Every NAME.run in the directory, by name, but the GPU machine's
        (gpu-*)."""
        try:
            names = sorted(n[:-4] for n in os.listdir(self.root)
                           if n.endswith(".run") and not n.startswith("gpu-"))
        except OSError as e:
            raise Error("%s: cannot read: %s" % (self.root, e.strerror))
        return [self.run(n) for n in names]

    def plots(self, stem):
        """Links to plots/STEM/*.png, relative to the document."""
        d = self.path(os.path.join("plots", stem))
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".png"))
        except OSError:
            return []
        return [os.path.relpath(os.path.join(d, n), self.doc_dir)
                for n in names]


class Records:
    def __init__(self, rs):
        self.rs = rs

    def get(self, mode, metric, **params):
        for r in self.rs:
            if r["mode"] == mode and r["metric"] == metric and \
                    all(r.get(k) == v for k, v in params.items()):
                return float(r["value"])
        return None

    def values(self, key, **match):
        """The distinct values of KEY among records matching MATCH, sorted."""
        out = set()
        for r in self.rs:
            if all(r.get(k) == v for k, v in match.items()) and \
                    r.get(key) is not None:
                out.add(r[key])
        return sorted(out)

    def has_mode(self, mode):
        return any(r["mode"] == mode for r in self.rs)


# --- Formatting ---------------------------------------------------------------

def sig(v, digits=3):
    """V to DIGITS significant digits, plain notation: 0.653, 12.6, 190."""
    if v is None or not math.isfinite(v):
        return "-"
    if v == 0:
        return "0"
    exp = math.floor(math.log10(abs(v)))
    decimals = max(digits - 1 - exp, 0)
    s = "%.*f" % (decimals, round(v, decimals))
    return group(s)


def group(s):
    """Thousands separators in the integer part: 12345.6 -> 12,345.6."""
    sign = "-" if s.startswith("-") else ""
    s = s.lstrip("-")
    whole, _, frac = s.partition(".")
    parts = []
    while len(whole) > 3:
        parts.insert(0, whole[-3:])
        whole = whole[:-3]
    parts.insert(0, whole)
    return sign + ",".join(parts) + ("." + frac if frac else "")


def rate(v):
    """A rate: 12.7 M, 394 K, 820."""
    if v is None or not math.isfinite(v):
        return "-"
    if v >= 1e6:
        return sig(v / 1e6) + " M"
    if v >= 1e4:
        return sig(v / 1e3) + " K"
    return sig(v)


def ratio(v):
    return "-" if v is None or not math.isfinite(v) else "%.2f" % v


def fixed(v, decimals):
    return "-" if v is None or not math.isfinite(v) else "%.*f" % (decimals, v)


def count(v):
    return "-" if v is None or not math.isfinite(v) else group("%d" % round(v))


def div(a, b):
    return a / b if a is not None and b else None


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
    for row in rows:
        out.append("| " + " | ".join(row) + " |")
    return out


def size(v):
    """A payload size: 16, 1 KiB, 64 KiB."""
    v = int(v)
    if v >= 1024 and v % 1024 == 0:
        return "%d KiB" % (v // 1024)
    return group("%d" % v)


# --- The tables ---------------------------------------------------------------

def block(data, stems, lines, listed=False):
    """A table's block: its command(s), the lines, its plots. LISTED: the
    commands as one list, for a table of many runs."""
    out = []
    for stem in stems:
        r = data.run(stem)
        how = "(tc at %s; load average %s at the start; %d s)" % (
            r["commit"], r["load"], r["seconds"])
        if listed:
            out.append("- `%s` %s" % (data.command(stem), how))
            continue
        out.append("`%s`" % data.command(stem))
        out.append("")
        out.append(how)
        out.append("")
    if listed:
        out.append("")
    out.extend(lines)
    links = [p for stem in stems for p in data.plots(stem)]
    if links:
        out.append("")
        out.append(" ".join("![%s](%s)" % (os.path.splitext(
            os.path.basename(p))[0], p) for p in links))
    return out


def machine(data):
    m = data.json("machine.json")
    if not isinstance(m, dict):
        raise Error("%s: expected an object" % data.path("machine.json"))

    def f(key):
        v = m.get(key)
        return str(v) if v not in (None, "") else "?"
    runs = data.runs()
    commits = sorted(set(r["commit"] for r in runs))
    return ["%s, %s CPUs (%s), %s, kernel %s; UCX %s, LLVM %s. The %d runs "
            "below took %.1f minutes in all; tc at %s."
            % (f("arch"), f("cpus"), f("cpu_model"), f("os"), f("kernel"),
               f("ucx"), f("llvm"), len(runs),
               sum(r["seconds"] for r in runs) / 60.0, ", ".join(commits))]


TSI_ROWS = ("ucx_perftest", "ucx_am", "ucx_put", "am", "cached",
            "cached-unbatched", "mailbox", "object", "sandbox", "uncached")
# Paired ratios in the order shown; any others follow, sorted.
TSI_RATIOS = ("cached/ucx_am", "cached-unbatched/ucx_am", "mailbox/ucx_put",
              "mailbox/ucx_am", "cached/am", "cached-unbatched/am",
              "cached/ucx_perftest", "cached-unbatched/ucx_perftest",
              "sandbox/cached", "cached/sandbox")


def tsi_rows(rs, modes):
    rows = []
    for mode in modes:
        if not rs.has_mode(mode):
            continue
        rows.append(["`%s`" % mode, sig(rs.get(mode, "latency_us")),
                     rate(rs.get(mode, "rate_msgs")),
                     count(rs.get(mode, "frame_bytes")),
                     sig(rs.get(mode, "msgs_per_am")),
                     fixed(rs.get(mode, "mailbox_share"), 2)])
    return rows


TSI_HEADER = ["mode", "latency (us)", "rate (msgs/s)", "frame bytes",
              "msgs per AM", "mailbox share"]


def ratio_rows(rs, order):
    names = [r["mode"] for r in rs.rs
             if r["metric"] in ("latency_ratio", "rate_ratio")]
    known = [n for n in order if n in names]
    rest = sorted(set(n for n in names if n not in order))
    return [["`%s`" % n, ratio(rs.get(n, "latency_ratio")),
             ratio(rs.get(n, "rate_ratio"))] for n in known + rest]


def render_tsi(data):
    rs = data.records("tsi")
    lines = table(TSI_HEADER, tsi_rows(rs, TSI_ROWS))
    lines += [""]
    lines += table(["paired ratio", "latency", "rate"],
                   ratio_rows(rs, TSI_RATIOS))
    return block(data, ["tsi"], lines)


BREAKDOWN = (("send_call_ns", "send call"), ("one_way_ns", "one way"),
             ("target_send_call_ns", "target's send call"),
             ("return_ns", "return"))


def render_breakdown(data):
    rs = data.records("tsi-breakdown")
    rows = []
    for mode in TSI_ROWS:
        if rs.get(mode, "one_way_ns") is None:
            continue
        rows.append(["`%s`" % mode] +
                    [sig(rs.get(mode, m)) for m, _ in BREAKDOWN] +
                    [sig(rs.get(mode, "latency_us"))])
    return block(data, ["tsi-breakdown"], table(
        ["mode"] + ["%s (ns)" % label for _, label in BREAKDOWN] +
        ["latency (us)"], rows))


def render_first_contact(data):
    rs = data.records("first-contact")
    rows = []
    for mode in ("jit", "object", "disk-cache"):
        if not rs.has_mode(mode):
            continue
        rows.append(["`%s`" % mode] + [sig(rs.get(mode, m)) for m in (
            "first_contact_ms", "jit_ms", "fresh_first_contact_ms",
            "fresh_jit_ms", "prewarm_ms")])
    lines = table(["mode", "first contact (ms)", "target's load (ms)",
                   "fresh: first contact (ms)", "fresh: load (ms)",
                   "prewarm (ms)"], rows)
    rows = []
    for mode in ("stall", "stall-sync"):
        if not rs.has_mode(mode):
            continue
        rows.append(["`%s`" % mode] + [sig(rs.get(mode, m)) for m in (
            "quiet_p50_us", "quiet_p99_us", "churn_p50_us", "churn_p99_us")]
            + [ratio(rs.get(mode, "p99_ratio")),
               count(rs.get(mode, "contacts")),
               sig(rs.get(mode, "contact_load_ms"))])
    if rows:
        lines += [""]
        lines += table(["mode", "quiet p50 (us)", "quiet p99 (us)",
                        "churn p50 (us)", "churn p99 (us)", "p99 ratio",
                        "loads", "load (ms)"], rows)
    return block(data, ["first-contact"], lines)


def render_sweep(data, stem):
    rs = data.records(stem)
    rows = []
    for p in rs.values("payload_bytes", metric="latency_us"):
        def three(metric, fmt):
            return " / ".join(fmt(rs.get(m, metric, payload_bytes=p))
                              for m in ("injected", "local", "ucx_am"))

        def pair(mode):
            return "%s, %s" % (
                ratio(rs.get(mode, "latency_ratio", payload_bytes=p)),
                ratio(rs.get(mode, "rate_ratio", payload_bytes=p)))

        def spread(mode):
            return fixed(rs.get(mode, "rate_spread", payload_bytes=p), 1)
        rows.append([size(p), three("latency_us", sig),
                     three("rate_msgs", rate), pair("injected/ucx_am"),
                     pair("injected/local"),
                     "%s, %s" % (spread("injected"), spread("ucx_am"))])
    return block(data, [stem], table(
        ["payload (bytes)", "latency (us): injected / local / ucx_am",
         "rate (msgs/s): injected / local / ucx_am",
         "injected/ucx_am: latency, rate", "injected/local: latency, rate",
         "rate spread (%): injected, ucx_am"], rows))


def dapc_points(rs, mode):
    return [(s, d) for s in rs.values("servers", mode=mode,
                                      metric="rate_chases")
            for d in rs.values("depth", mode=mode, metric="rate_chases",
                               servers=s)]


def render_dapc(data):
    rs = data.records("dapc")
    rows = []
    for s, d in dapc_points(rs, "dapc"):
        v = {m: rs.get(m, "rate_chases", servers=s, depth=d)
             for m in ("dapc", "am", "gbpc")}
        rows.append([count(s), count(d), sig(v["dapc"]), sig(v["am"]),
                     sig(v["gbpc"]), ratio(div(v["dapc"], v["gbpc"]))])
    return block(data, ["dapc"], table(
        ["servers", "depth", "dapc (chases/s)", "am (chases/s)",
         "gbpc (chases/s)", "dapc/gbpc"], rows))


def render_sandbox(data):
    rs = data.records("sandbox-tsi")
    lines = table(TSI_HEADER, tsi_rows(rs, ("cached", "sandbox")))
    lines += [""]
    lines += table(["paired ratio", "latency", "rate"],
                   ratio_rows(rs, ("sandbox/cached", "cached/sandbox")))
    rd = data.records("sandbox-dapc")
    rows = []
    for s, d in dapc_points(rd, "dapc"):
        a = rd.get("dapc", "rate_chases", servers=s, depth=d)
        b = rd.get("dapc-sandbox", "rate_chases", servers=s, depth=d)
        rows.append([count(s), count(d), sig(a), sig(b), ratio(div(a, b))])
    lines += [""]
    lines += table(["servers", "depth", "dapc (chases/s)",
                    "dapc-sandbox (chases/s)", "dapc/dapc-sandbox"], rows)
    return block(data, ["sandbox-tsi", "sandbox-dapc"], lines)


def render_launch(data):
    rh = data.records("launch-hosts")
    rm = data.records("launch-mpirun")
    rows = []
    for s, d in dapc_points(rh, "dapc"):
        for mode in ("dapc", "am"):
            h = rh.get(mode, "rate_chases", servers=s, depth=d)
            m = rm.get(mode, "rate_chases", servers=s, depth=d)
            if h is None and m is None:
                continue
            rows.append([count(s), count(d), "`%s`" % mode, sig(h), sig(m),
                         ratio(div(m, h))])
    return block(data, ["launch-hosts", "launch-mpirun"], table(
        ["servers", "depth", "mode", "hosts file (chases/s)",
         "mpirun (chases/s)", "mpirun/hosts file"], rows))


# MPI RMA: the runs, each a benchmark over one transport, in table order.
MPI_RUNS = (("mpi-tsi", "tsi", "shm"), ("mpi-tsi-tcp", "tsi", "tcp, loopback"),
            ("mpi-sss", "sss", "shm"), ("mpi-sss-tcp", "sss", "tcp, loopback"),
            ("mpi-iput", "iput", "shm"),
            ("mpi-iput-tcp", "iput", "tcp, loopback"),
            ("mpi-dapc", "dapc", "shm"),
            ("mpi-dapc-tcp", "dapc", "tcp, loopback"),
            ("mpi-dapc-netns", "dapc", "tcp, netns hosts"))
# The tc modes set beside MPI, per benchmark.
MPI_TC = {"tsi": ("cached", "mailbox"), "sss": ("injected",),
          "iput": ("injected",), "dapc": ("dapc",)}
# Issue #36's target: across network-namespace hosts, dapc at least this
# many times the best MPI_Get chase, at depths from MPI_TARGET_DEPTH on.
MPI_TARGET, MPI_TARGET_DEPTH = 3.0, 64


def mpi_ops(rs):
    """The MPI operations of a run (mpi_acc, mpi_fop, ...), in record order."""
    out = []
    for r in rs.rs:
        op = r["mode"].split(":")[0]
        if r["mode"].startswith("mpi_") and op not in out:
            out.append(op)
    return out


def mpi_row(rs, op, metric, **params):
    """The row (OP:OSC) that carries OP's METRIC at PARAMS, or None."""
    for r in rs.rs:
        if r["mode"].startswith(op + ":") and r["metric"] == metric and \
                all(r.get(k) == v for k, v in params.items()):
            return r["mode"]
    return None


def render_mpi_rma(data):
    # Ratios here span 0.001x to 1,000x: three significant digits.
    rows, target = [], {}
    for stem, bench, transport in MPI_RUNS:
        rs = data.records(stem)
        tcs = [m for m in MPI_TC[bench] if rs.has_mode(m)]
        if bench == "dapc":
            points = [({"servers": s, "depth": d},
                       "%s server%s, depth %s" % (count(s), "" if s == 1
                                                  else "s", count(d)))
                      for s, d in dapc_points(rs, "dapc")]
        elif bench == "tsi":
            points = [({}, "increment")]
        else:
            points = [({"payload_bytes": p}, size(p) + " B" if p < 1024
                       else size(p))
                      for p in rs.values("payload_bytes",
                                         metric="latency_us")]
        for params, label in points:
            for tc in tcs:
                for op in mpi_ops(rs):
                    if bench == "dapc":
                        m = mpi_row(rs, op, "rate_chases", **params)
                        a = rs.get(tc, "rate_chases", **params)
                        b = rs.get(m, "rate_chases", **params) if m else None
                        if a is None and b is None:
                            continue
                        rows.append([bench, transport, label, "`%s`" % tc,
                                     "`%s`" % m if m else "-", "-", "-",
                                     "%s / %s" % (sig(a), sig(b)),
                                     sig(div(a, b))])
                        if transport.endswith("netns hosts") and \
                                params["depth"] >= MPI_TARGET_DEPTH and \
                                div(a, b) is not None:
                            target.setdefault(params["servers"], []).append(
                                (div(a, b), params["depth"]))
                        continue
                    lat = mpi_row(rs, op, "latency_us", **params)
                    rt = mpi_row(rs, op, "rate_msgs", **params)
                    if not lat and not rt:
                        continue
                    name = lat or rt
                    if lat and rt and rt != lat:
                        name += ", :" + rt.split(":", 1)[1]
                    rows.append([
                        bench, transport, label, "`%s`" % tc, "`%s`" % name,
                        "%s / %s" % (sig(rs.get(tc, "latency_us", **params)),
                                     sig(rs.get(lat, "latency_us", **params)
                                         if lat else None)),
                        sig(rs.get("%s/%s" % (tc, lat), "latency_ratio",
                                   **params) if lat else None),
                        "%s / %s" % (rate(rs.get(tc, "rate_msgs", **params)),
                                     rate(rs.get(rt, "rate_msgs", **params)
                                          if rt else None)),
                        sig(rs.get("%s/%s" % (tc, rt), "rate_ratio",
                                   **params) if rt else None)])
    lines = table(["benchmark", "transport", "point", "tc", "MPI (OP:OSC)",
                   "latency (us): tc / MPI", "tc/MPI latency",
                   "rate (per s): tc / MPI", "tc/MPI rate"], rows)
    lines.append("")
    if target:
        # Per server count: one server keeps the whole chase at the data,
        # two or more send hops across the network.
        said = []
        for servers in sorted(target):
            least, depth = min(target[servers])
            said.append("with %d server%s %s (the least %sx, at depth %s)"
                        % (servers, "" if servers == 1 else "s",
                           "met" if least >= MPI_TARGET else "missed",
                           sig(least), count(depth)))
        lines.append(
            "Issue #36's target, dapc >= %.0fx the best MPI_Get chase across "
            "network-namespace hosts at depth >= %d, in this run: %s."
            % (MPI_TARGET, MPI_TARGET_DEPTH, "; ".join(said)))
    else:
        lines.append("Issue #36's target (dapc >= %.0fx the best MPI_Get "
                     "chase across network-namespace hosts at depth >= %d): "
                     "not measured in this run." % (MPI_TARGET,
                                                    MPI_TARGET_DEPTH))
    return block(data, [r[0] for r in MPI_RUNS], lines, listed=True)


def render_slurm_launch(data):
    rs = data.records("slurm-launch")
    launchers = ("mpirun", "srun")

    def both(metric, fmt, **params):
        return " / ".join(fmt(rs.get(l, metric, **params)) for l in launchers)
    rows = []
    for n in rs.values("ranks", bench="launch", metric="job_ms"):
        jobs = [rs.get(l, "jobs", ranks=n) for l in launchers]
        rows.append([count(n), count(jobs[0]) if jobs[0] == jobs[1] else
                     " / ".join(count(j) for j in jobs),
                     both("job_ms", sig, ranks=n),
                     ratio(rs.get("srun/mpirun", "job_ratio", ranks=n)),
                     both("wireup_max_ms", sig, ranks=n),
                     both("wireup_min_ms", sig, ranks=n),
                     ratio(rs.get("srun/mpirun", "wireup_max_ratio",
                                  ranks=n)),
                     both("fence_ms", sig, ranks=n),
                     both("chases_ms", sig, ranks=n)])
    lines = table(["ranks", "jobs", "job (ms): mpirun / srun",
                   "srun/mpirun job", "wire-up, slowest rank (ms)",
                   "wire-up, fastest rank (ms)", "srun/mpirun wire-up",
                   "fence (ms)", "20 chases (ms)"], rows)
    rows = []
    for s, d in dapc_points(rs, "dapc"):
        for mode in ("dapc", "am"):
            m, sr = (rs.get(mode, "rate_chases", servers=s, depth=d,
                            launcher=l) for l in launchers)
            if m is None and sr is None:
                continue
            rows.append([count(s), count(d), "`%s`" % mode, sig(m), sig(sr),
                         ratio(div(sr, m))])
    if rows:
        lines += [""]
        lines += table(["servers", "depth", "mode", "mpirun (chases/s)",
                        "srun (chases/s)", "srun/mpirun"], rows)
        lines += ["", "The DAPC jobs, start to exit: %s ms under mpirun, %s "
                  "ms under srun." % tuple(
                      sig(rs.get(l, "job_ms", launcher=l))
                      for l in launchers)]
    return block(data, ["slurm-launch"], lines)


def render_rank_scaling(data):
    """scripts/rank-scaling.sh --json: its table as it printed it (cells
    already rounded there), and its note."""
    j = data.json("rank-scaling.json")
    cols = j.get("columns") if isinstance(j, dict) else None
    rows = j.get("rows") if isinstance(j, dict) else None
    if not isinstance(cols, list) or not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == len(cols) for r in rows):
        raise Error("%s: expected columns and rows of as many cells"
                    % data.path("rank-scaling.json"))
    lines = table([str(c) for c in cols],
                  [[str(c) for c in r] for r in rows])
    if j.get("note"):
        lines += ["", str(j["note"])]
    return block(data, ["rank-scaling"], lines)


# tc-kv beside the MPI versions: the runs, each one transport.
KV_RUNS = (("kv", "shm"), ("kv-tcp", "tcp, loopback"),
           ("kv-netns", "tcp, netns hosts"))
KV_MODES = ("tc", "mpi", "alltoall")
# Issue #41's targets over TCP: tc's upsert rate at least KV_MPI_RATE x MPI
# RMA's and KV_A2A_RATE x the all-to-all's, its get latency at most
# KV_LATENCY x MPI RMA's; every rank's table at most KV_MEMORY x its keys'
# and values' bytes.
KV_MPI_RATE, KV_A2A_RATE, KV_LATENCY, KV_MEMORY = 3.0, 0.67, 0.5, 2.0


def render_kv(data):
    rows, ratios = [], []
    tcp = {"upsert_rate/mpi": [], "upsert_rate/alltoall": [],
           "get_latency/mpi": []}
    memory = []
    for stem, where in KV_RUNS:
        rs = data.records(stem)
        for n in rs.values("ranks", metric="upsert_rate"):
            def get(mode, metric):
                return rs.get(mode, metric, ranks=n)

            def osc(mode):
                for r in rs.rs:
                    if r["mode"] == mode and r.get("ranks") == n and \
                            r["metric"] == "upsert_rate":
                        return r.get("osc")
                return None
            for mode in KV_MODES:
                if get(mode, "upsert_rate") is None:
                    continue
                o = osc(mode)
                lat_osc = None
                for r in rs.rs:
                    if r["mode"] == mode and r.get("ranks") == n and \
                            r["metric"] == "get_latency_us":
                        lat_osc = r.get("osc")
                name = "`%s`" % mode
                if o:
                    name += " (%s%s)" % (o, ", latency: %s" % lat_osc
                                         if lat_osc and lat_osc != o else "")
                ratio_t = get(mode, "table_ratio")
                if mode == "tc" and ratio_t is not None:
                    memory.append((ratio_t, where, n))
                rows.append([where, count(n), name,
                             rate(get(mode, "upsert_rate")),
                             sig(get(mode, "get_latency_us")),
                             rate(get(mode, "get_rate")),
                             fixed(ratio_t, 2)])
            r_mpi = rs.get("tc/mpi", "upsert_rate_ratio", ranks=n)
            r_a2a = rs.get("tc/alltoall", "upsert_rate_ratio", ranks=n)
            r_lat = rs.get("tc/mpi", "get_latency_ratio", ranks=n)
            ratios.append([where, count(n), sig(r_mpi), sig(r_a2a),
                           sig(r_lat),
                           sig(rs.get("tc/mpi", "get_rate_ratio", ranks=n)),
                           sig(rs.get("tc/alltoall", "get_rate_ratio",
                                      ranks=n))])
            if where.startswith("tcp"):
                for key, v in (("upsert_rate/mpi", r_mpi),
                               ("upsert_rate/alltoall", r_a2a),
                               ("get_latency/mpi", r_lat)):
                    if v is not None:
                        tcp[key].append((v, where, n))
    lines = table(["transport", "ranks", "version (osc)",
                   "upserts/s", "get latency p50 (us)", "gets/s",
                   "table / keys+values"], rows)
    lines += [""]
    lines += table(["transport", "ranks", "tc/mpi upserts",
                    "tc/alltoall upserts", "tc/mpi get latency",
                    "tc/mpi gets", "tc/alltoall gets"], ratios)
    lines += [""]

    def verdict(key, bound, low):
        """Met or missed over the TCP rows, and the worst ratio where."""
        if not tcp[key]:
            return "not measured"
        worst = (max if low else min)(tcp[key])
        ok = worst[0] <= bound if low else worst[0] >= bound
        return "%s (the %s %sx, %s, %s ranks)" % (
            "met" if ok else "missed", "most" if low else "least",
            sig(worst[0]), worst[1], count(worst[2]))
    mem = "not measured"
    if memory:
        worst = max(memory)
        mem = "%s (the largest %sx, %s, %s ranks)" % (
            "met" if worst[0] <= KV_MEMORY else "missed", fixed(worst[0], 2),
            worst[1], count(worst[2]))
    lines.append(
        "Issue #41's targets in this run, over TCP: tc's upserts >= %.0fx MPI "
        "RMA's %s; >= %.2fx the all-to-all's %s; tc's get latency <= %.1fx "
        "MPI RMA's %s. A rank's table <= %.0fx its keys' and values' bytes: "
        "%s." % (KV_MPI_RATE, verdict("upsert_rate/mpi", KV_MPI_RATE, False),
                 KV_A2A_RATE,
                 verdict("upsert_rate/alltoall", KV_A2A_RATE, False),
                 KV_LATENCY, verdict("get_latency/mpi", KV_LATENCY, True),
                 KV_MEMORY, mem))
    return block(data, [r[0] for r in KV_RUNS], lines, listed=True)


GPU_RUNS = ("gpu-tsi", "gpu-sss")
GPU_NOT_MEASURED = (
    "Not measured yet: docs/bench/ holds no GPU run (the machine above has "
    "no GPU). On a machine with an NVIDIA GPU, `bash scripts/gpu-check.sh "
    "tc-VERSION-x86_64-linux.tar.xz --full --save DIR` runs both benchmarks "
    "and saves their output in DIR; copy DIR/* into docs/bench/ and run "
    "`bash scripts/bench-tables.sh --render`.")


def render_gpu(data):
    stems = [s for s in GPU_RUNS if data.exists(s + ".json")]
    if not stems:
        return [GPU_NOT_MEASURED]
    dev = data.json("gpu-device.json")
    if not isinstance(dev, dict) or not isinstance(dev.get("device"), str):
        raise Error("%s: expected the device"
                    % data.path("gpu-device.json"))
    lines = ["Device: %s%s." % (dev["device"], "; bundle %s" % dev["bundle"]
                                if dev.get("bundle") else ""), ""]
    rows = []
    if "gpu-tsi" in stems:
        t = data.records("gpu-tsi")
        for label, a, b in (
                ("tsi round trip p50 (us)", t.get("gpu", "round_trip_p50"),
                 t.get("cuda_raw", "round_trip_p50")),
                ("tsi round trip p99 (us)", t.get("gpu", "round_trip_p99"),
                 t.get("cuda_raw", "round_trip_p99"))):
            rows.append([label, sig(a), sig(b), ratio(div(a, b))])
        a, b = t.get("gpu", "rate"), t.get("cuda_raw", "rate")
        rows.append(["tsi rate (msgs/s)", rate(a), rate(b), ratio(div(a, b))])
        a = t.get("first_contact", "cold_load")
        b = t.get("first_contact", "driver_jit")
        rows.append(["first contact: the target's load / the driver's JIT "
                     "(ms)", sig(a), sig(b), ratio(div(a, b))])
        rows.append(["first contact: round trip (ms)",
                     sig(t.get("first_contact", "cold_round_trip")), "-",
                     "-"])
        rows.append(["the driver's first JIT in a process (ms)", "-",
                     sig(t.get("first_contact", "driver_first_jit")), "-"])
        rows.append(["load from the disk cache (ms)",
                     sig(t.get("first_contact", "disk_cache_load")), "-",
                     "-"])
    if "gpu-sss" in stems:
        g = data.records("gpu-sss")
        a = g.get("gpu", "bandwidth")
        b = g.get("cuda_memcpy_dtod", "bandwidth_read_write")
        rows.append(["sss bandwidth (GB/s)", sig(a), sig(b),
                     ratio(div(a, b))])
    lines += table(["figure", "tc (`gpu`)",
                    "CUDA driver (`cuda_raw`, `cuMemcpyDtoDAsync`)",
                    "tc / driver"], rows)
    return block(data, stems, lines)


def render_gpu_breakdown(data):
    """Where a tsi --gpu message's time goes: the driver calls per message
    on each side (tc-serve --gpu-trace; cuda_raw counts its own), tc's hops
    to its GPU worker and back, and a first contact's split."""
    if not data.exists("gpu-tsi.json"):
        return [GPU_NOT_MEASURED]
    t = data.records("gpu-tsi")
    calls = sorted(set(
        m[len("driver_calls_"):] for m in t.values("metric")
        if m.startswith("driver_calls_")))
    rows = []
    for c in calls:
        rows.append(["`%s`" % c,
                     sig(t.get("gpu", "driver_calls_" + c)),
                     sig(t.get("gpu", "driver_us_" + c)),
                     sig(t.get("cuda_raw", "driver_calls_" + c)),
                     sig(t.get("cuda_raw", "driver_us_" + c))])
    rows.append(["all driver calls", "-",
                 sig(t.get("gpu", "driver_us_total")), "-",
                 sig(t.get("cuda_raw", "driver_us_total"))])
    lines = table(["driver call, per message", "tc: calls", "tc: us",
                   "cuda_raw: calls", "cuda_raw: us"], rows)
    lines += ["", "tc's pipeline (means over messages that found no queue): "
              "tc-serve to its GPU worker %s us, a launch on an idle stream "
              "until the worker sees it done %s us, the worker back to "
              "tc-serve %s us. First contact: LLVM's lowering to PTX %s ms, "
              "the driver's load of it %s ms, %s ms in all, against the "
              "driver's own JIT of the same PTX, %s ms." % (
                  sig(t.get("gpu", "hop_command")),
                  sig(t.get("gpu", "device")),
                  sig(t.get("gpu", "hop_completion")),
                  sig(t.get("first_contact", "cold_ptx")),
                  sig(t.get("first_contact", "cold_driver_load")),
                  sig(t.get("first_contact", "cold_load")),
                  sig(t.get("first_contact", "driver_jit")))]
    return block(data, ["gpu-tsi"], lines)


TABLES = {
    "machine": machine,
    "tsi": render_tsi,
    "tsi-breakdown": render_breakdown,
    "first-contact": render_first_contact,
    "sss": lambda d: render_sweep(d, "sss"),
    "iput": lambda d: render_sweep(d, "iput"),
    "dapc": render_dapc,
    "sandbox": render_sandbox,
    "launch": render_launch,
    "slurm-launch": render_slurm_launch,
    "rank-scaling": render_rank_scaling,
    "mpi-rma": render_mpi_rma,
    "kv": render_kv,
    "gpu": render_gpu,
    "gpu-breakdown": render_gpu_breakdown,
}

MARKER = re.compile(r"^<!-- (BEGIN|END) bench-table ([a-z0-9-]+) -->$")


def blocks(lines, doc):
    """[(name, begin line index, end line index)], markers checked."""
    out, open_ = [], None
    for i, line in enumerate(lines):
        m = MARKER.match(line.rstrip("\n"))
        if not m:
            if line.lstrip().startswith("<!-- BEGIN bench-table") or \
                    line.lstrip().startswith("<!-- END bench-table"):
                raise Error("%s:%d: malformed marker" % (doc, i + 1))
            continue
        kind, name = m.groups()
        if name not in TABLES:
            raise Error("%s:%d: unknown table '%s'" % (doc, i + 1, name))
        if kind == "BEGIN":
            if open_:
                raise Error("%s:%d: BEGIN %s inside %s" % (doc, i + 1, name,
                                                          open_[0]))
            open_ = (name, i)
        else:
            if not open_ or open_[0] != name:
                raise Error("%s:%d: END %s without its BEGIN"
                            % (doc, i + 1, name))
            out.append((name, open_[1], i))
            open_ = None
    if open_:
        raise Error("%s:%d: BEGIN %s without its END" % (doc, open_[1] + 1,
                                                         open_[0]))
    seen = [b[0] for b in out]
    for name in TABLES:
        n = seen.count(name)
        if n != 1:
            raise Error("%s: table '%s' has %s" % (
                doc, name, "no markers" if n == 0 else "%d pairs of markers"
                % n))
    return out


def render(lines, doc, data):
    out, last = [], 0
    for name, begin, end in blocks(lines, doc):
        out.extend(lines[last:begin + 1])
        out.extend(line + "\n" for line in TABLES[name](data))
        out.append(lines[end])
        last = end + 1
    out.extend(lines[last:])
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(
        prog="bench-tables.py",
        description="Render the tables of docs/benchmarks.md from saved "
                    "tc-bench --json output.")
    ap.add_argument("doc", metavar="DOC", nargs="?")
    ap.add_argument("--data", metavar="DIR",
                    help="the saved runs (default: DOC's directory/bench)")
    ap.add_argument("--table", metavar="NAME",
                    help="print only table NAME rendered from DIR")
    ap.add_argument("-o", metavar="OUT", dest="out",
                    help="write here instead of DOC ('-': stdout)")
    ap.add_argument("--check", action="store_true",
                    help="only check DOC's markers")
    a = ap.parse_args()
    if a.table is not None:
        if a.doc or not a.data or a.check or a.out:
            ap.error("--table NAME takes --data DIR and nothing else")
        if a.table not in TABLES:
            fail("unknown table '%s' (expected one of: %s)"
                 % (a.table, ", ".join(TABLES)))
        try:
            parent = os.path.dirname(os.path.abspath(a.data))
            body = TABLES[a.table](Data(a.data, parent))
        except Error as e:
            fail(str(e))
        sys.stdout.write("".join(line + "\n" for line in body))
        return
    if not a.doc:
        ap.error("DOC is required")
    try:
        try:
            with open(a.doc, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError as e:
            raise Error("%s: cannot read: %s" % (a.doc, e.strerror))
        if a.check:
            n = len(blocks(lines, a.doc))
            print("%s: %d tables, markers in order" % (a.doc, n))
            return
        # Plots are linked relative to DOC, wherever the rendering goes.
        doc_dir = os.path.dirname(os.path.abspath(a.doc))
        data = Data(a.data or os.path.join(doc_dir, "bench"), doc_dir)
        text = render(lines, a.doc, data)
    except Error as e:
        fail(str(e))
    if a.out == "-":
        sys.stdout.write(text)
        return
    target = a.out or a.doc
    tmp = target + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except OSError as e:
        fail("%s: cannot write: %s" % (target, e.strerror))


if __name__ == "__main__":
    main()
