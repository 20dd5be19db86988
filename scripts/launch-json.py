#!/usr/bin/python3
"""What scripts/launch-bench.sh measured, as tc-bench --json records.

    scripts/launch-json.py DIR

DIR holds one directory per job that launch-bench.sh ran:

    chase-LAUNCHER-N-J/   tc-mpi-chase -v over N ranks, job J (1, 2, ...)
        wall_ms           the launcher's run, start to exit, in ms
        rank.R.err        rank R's stderr, R = 0 .. N-1: its line
                          "tc-mpi-chase: rank R: worker created and wired up
                          (publish B-byte address + fence) in X ms"; rank 0's
                          also "tc-mpi-chase: N ranks: K barriers, X ms each"
                          and "tc-mpi-chase: rank 0: C chases in X ms"
        rank.0.out        rank 0's stdout: "tc-mpi-chase: C chases of depth
                          D over N ranks: ok"
    dapc-LAUNCHER/        tc-bench dapc --pmix as rank 0
        wall_ms
        rank.0.out        its --json output

and prints one JSON array on stdout. Per launcher and rank count, over the
jobs (bench "launch", mode the launcher, "ranks": N), the median of:
job_ms (the launcher's run), wireup_max_ms and wireup_min_ms (the slowest
and the fastest rank's tc_worker_create with the PMIx bootstrap: publishing
its address and the fence, which ends when the last rank arrives),
fence_ms (rank 0's mean data-less fence) and chases_ms (rank 0's chases,
the first of which has every rank compile the chaser); and jobs (how
many). Per rank count, mode "srun/mpirun" (any two launchers,
sorted): job_ratio and wireup_max_ratio, the median over job pairs J of
the ratio within the pair. The dapc records are tc-bench's, each with
"launcher" added, and a record of metric job_ms per launcher.

Anything missing or malformed is one line, `launch-json.py: error: ...`,
exit 1. Standard library only (Debian's /usr/bin/python3).
"""
import json
import os
import re
import statistics
import sys


class Error(Exception):
    pass


WIREUP = re.compile(r"^tc-mpi-chase: rank (\d+): worker created and wired up "
                    r"\(publish \d+-byte address \+ fence\) in ([0-9.]+) ms$")
FENCE = re.compile(r"^tc-mpi-chase: (\d+) ranks: (\d+) barriers, ([0-9.]+) ms "
                   r"each$")
CHASES = re.compile(r"^tc-mpi-chase: rank 0: (\d+) chases in ([0-9.]+) ms$")
OK = re.compile(r"^tc-mpi-chase: (\d+) chases of depth (\d+) over (\d+) ranks: "
                r"ok$")
CHASE_DIR = re.compile(r"^chase-([a-z]+)-(\d+)-(\d+)$")
DAPC_DIR = re.compile(r"^dapc-([a-z]+)$")


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise Error("%s: cannot read: %s" % (path, e.strerror))


def wall_ms(d):
    text = read(os.path.join(d, "wall_ms")).strip()
    try:
        v = float(text)
    except ValueError:
        v = -1
    if not v > 0:
        raise Error("%s: not a time in ms: '%s'"
                    % (os.path.join(d, "wall_ms"), text))
    return v


def match_one(regex, path, what):
    for line in read(path).splitlines():
        m = regex.match(line.strip())
        if m:
            return m
    raise Error("%s: no %s line" % (path, what))


def chase_job(d, ranks):
    """The figures of one tc-mpi-chase job in D."""
    wireups = []
    for r in range(ranks):
        path = os.path.join(d, "rank.%d.err" % r)
        m = match_one(WIREUP, path, "wire-up (tc-mpi-chase -v)")
        if int(m.group(1)) != r:
            raise Error("%s: the wire-up line is rank %s's" % (path,
                                                               m.group(1)))
        wireups.append(float(m.group(2)))
    err0 = os.path.join(d, "rank.0.err")
    f = match_one(FENCE, err0, "barriers (tc-mpi-chase --barriers)")
    c = match_one(CHASES, err0, "chases (tc-mpi-chase -v)")
    ok = match_one(OK, os.path.join(d, "rank.0.out"), "ok")
    if int(f.group(1)) != ranks or int(ok.group(3)) != ranks:
        raise Error("%s: the job ran over %s ranks, not %d"
                    % (d, ok.group(3) if int(ok.group(3)) != ranks
                       else f.group(1), ranks))
    if os.path.exists(os.path.join(d, "rank.%d.err" % ranks)):
        raise Error("%s: more than %d ranks" % (d, ranks))
    return {"job_ms": wall_ms(d), "wireup_max_ms": max(wireups),
            "wireup_min_ms": min(wireups), "fence_ms": float(f.group(3)),
            "chases_ms": float(c.group(2))}


UNITS = {"job_ms": "ms", "wireup_max_ms": "ms", "wireup_min_ms": "ms",
         "fence_ms": "ms", "chases_ms": "ms", "jobs": "jobs",
         "job_ratio": "x", "wireup_max_ratio": "x"}


def record(mode, metric, value, ranks):
    return {"bench": "launch", "mode": mode, "metric": metric,
            "value": round(value, 6), "unit": UNITS[metric], "ranks": ranks}


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(1)
    top = sys.argv[1]
    try:
        try:
            names = sorted(os.listdir(top))
        except OSError as e:
            raise Error("%s: cannot read: %s" % (top, e.strerror))
        jobs = {}  # (launcher, ranks) -> {job number: figures}
        dapc = {}  # launcher -> directory
        for n in names:
            d = os.path.join(top, n)
            m = CHASE_DIR.match(n)
            if m:
                launcher, ranks, j = m.group(1), int(m.group(2)), int(
                    m.group(3))
                if ranks < 1:
                    raise Error("%s: no ranks" % d)
                jobs.setdefault((launcher, ranks), {})[j] = chase_job(d, ranks)
                continue
            m = DAPC_DIR.match(n)
            if m:
                dapc[m.group(1)] = d
                continue
            raise Error("%s: not a job of launch-bench.sh" % d)
        if not jobs and not dapc:
            raise Error("%s: no jobs" % top)
        out = []
        launchers = sorted(set(k[0] for k in jobs))
        for ranks in sorted(set(k[1] for k in jobs)):
            for launcher in launchers:
                runs = jobs.get((launcher, ranks))
                if not runs:
                    continue
                for metric in ("job_ms", "wireup_max_ms", "wireup_min_ms",
                               "fence_ms", "chases_ms"):
                    out.append(record(launcher, metric, statistics.median(
                        r[metric] for r in runs.values()), ranks))
                out.append(record(launcher, "jobs", len(runs), ranks))
            for i, a in enumerate(launchers):
                for b in launchers[i + 1:]:
                    # In name order: srun/mpirun.
                    num, den = b, a
                    ra, rb = jobs.get((num, ranks), {}), jobs.get((den, ranks),
                                                                  {})
                    pairs = sorted(set(ra) & set(rb))
                    if not pairs:
                        continue
                    for metric, name in (("job_ms", "job_ratio"),
                                         ("wireup_max_ms",
                                          "wireup_max_ratio")):
                        out.append(record(num + "/" + den, name,
                                          statistics.median(
                                              ra[j][metric] / rb[j][metric]
                                              for j in pairs), ranks))
        for launcher in sorted(dapc):
            d = dapc[launcher]
            path = os.path.join(d, "rank.0.out")
            try:
                rs = json.loads(read(path))
            except json.JSONDecodeError as e:
                raise Error("%s:%d: malformed JSON: %s" % (path, e.lineno,
                                                           e.msg))
            if not isinstance(rs, list) or not rs or not all(
                    isinstance(r, dict) and r.get("bench") == "dapc"
                    for r in rs):
                raise Error("%s: expected tc-bench dapc records" % path)
            for r in rs:
                out.append(dict(r, launcher=launcher))
            out.append({"bench": "dapc", "mode": launcher, "metric": "job_ms",
                        "value": round(wall_ms(d), 6), "unit": "ms",
                        "launcher": launcher})
    except Error as e:
        print("launch-json.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    print("[")
    print(",\n".join(" " + json.dumps(r, separators=(",", ":")) for r in out))
    print("]")


if __name__ == "__main__":
    main()
