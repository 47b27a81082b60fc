"""bench/harness/core.py — what every suite of the benchmark runner shares: rounds, raw rows,
the machine class, processes timed by the OS, true medians and ranges.

A suite runs its cases in rounds; within a round every case (tool, recipe, layout, ...) runs
once, and the order of the cases is reversed in every other round, so a change in the
machine's load hits all of them alike. Each measurement is its own process; peak RSS is the
OS's (/usr/bin/time -f %M, KiB). Each measured process gives one raw row (JSON, one line),
carrying the suite, the case, the round, the machine class (`mxtrain info`'s first line), the
exact command, its start time, the load average before and after, and the commit of the work
tree (`git describe --dirty`). Tables are rendered from
the committed rows (bench/harness/render.py), never typed. Standard library only.
"""
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RAW = os.path.join(ROOT, "docs", "results", "raw")


def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


# ---- statistics ------------------------------------------------------------------------------

def median(values):
    """The true median: the mean of the middle two for an even count."""
    v = list(values)
    if not v:
        raise ValueError("median of no values")
    return statistics.median(v)


def mrange(values, fmt="{:.1f}", unit=""):
    """'median (least-greatest)' of the values, each formatted with fmt; the range is left out
    for a single value."""
    v = list(values)
    m = fmt.format(median(v)) + unit
    if len(v) > 1:
        m += f" ({fmt.format(min(v))}-{fmt.format(max(v))}{unit})"
    return m


def ratio_cell(values, fmt="{:.2f}"):
    """Per-round ratios as 'median x (least-greatest x)'."""
    return mrange(values, fmt, "x") if values else "–"


def per_round(rows, key, num, den, value="median_step_ms"):
    """num's value / den's value for every round where both ran; rows are selected by key(row)
    equal to num or den."""
    a, b = {}, {}
    for r in rows:
        k = key(r)
        if k == num:
            a[r["round"]] = r[value]
        elif k == den:
            b[r["round"]] = r[value]
    return [a[x] / b[x] for x in sorted(a) if x in b]


def group(rows, *keys):
    out = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def fmt_int(x):
    return f"{x:,.0f}"


# ---- markdown --------------------------------------------------------------------------------

def md_table(header, rows, align=None):
    """A Markdown table; align is a string of 'l'/'r' per column (default: first left)."""
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def load_note(rows):
    """The 1-minute load average at the runs' starts and ends, from rows that recorded it."""
    v = [float(r[k].split()[0]) for r in rows for k in ("loadavg_before", "loadavg_after")
         if isinstance(r.get(k), str)]
    return f"load average (1 min) at the runs' starts and ends: {min(v):.1f}-{max(v):.1f}" if v else ""


def machines_line(rows):
    ms = sorted({r.get("machine", "?") for r in rows})
    return "Machine: " + "; ".join(f"`{m}`" for m in ms) + "."


# ---- raw rows --------------------------------------------------------------------------------

def read_rows(path):
    """Every JSON line of a raw file (path relative to docs/results/raw or absolute)."""
    p = path if os.path.isabs(path) else os.path.join(RAW, path)
    with open(p) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def machine_class(binary):
    """`mxtrain info`'s first line without its 'CPU: ' prefix, e.g. 'AMD EPYC; Zen 4 class
    (AMD family 25; AVX512-BF16, no AMX)'."""
    line = subprocess.run([binary, "info"], check=True, capture_output=True,
                          text=True).stdout.splitlines()[0]
    return line[len("CPU: "):] if line.startswith("CPU: ") else line


def class_tag(machine):
    """A short file-name tag for a machine class: 'zen4', 'zen5', 'xeonamx' (Xeon with
    AMX-BF16), or the first word."""
    import re
    m = re.search(r"Zen (\d+)", machine)
    if m:
        return f"zen{m.group(1)}"
    if "Xeon with AMX-BF16 class" in machine:
        return "xeonamx"
    return re.sub(r"[^a-z0-9]+", "", machine.split(";")[0].lower())[:12] or "machine"


def rel(path):
    """A path as the command line a user would type it from the repository root."""
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


def git_describe(tree):
    """`git describe --always --dirty` of the work tree at `tree` ("" outside a git tree)."""
    r = subprocess.run(["git", "-C", tree, "describe", "--always", "--dirty"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


class Context:
    """One invocation of the runner: the binary, the machine class, the work directory, the
    rounds, and where the rows go."""

    def __init__(self, binary, rounds, work, quick=False, python=None, out=None):
        self.binary = binary
        self.rounds = rounds
        self.work = work
        self.quick = quick
        self.python = python  # the pinned environment's interpreter, made on first use
        self.out = out        # rows file override (default: docs/results/raw/<suite>_<class>.jsonl)
        self.machine = machine_class(binary)
        self.tag = class_tag(self.machine)
        # The source the binary was built from, as far as the work tree it sits in says: this
        # checkout's for build/mxtrain, another checkout's for a binary built there (--binary,
        # MXTRAIN_BIN: a baseline). Rows of earlier runs have none.
        self.commit = git_describe(os.path.dirname(os.path.abspath(binary))) or git_describe(ROOT)

    def pinned_python(self):
        """The interpreter of scripts/pyenv.sh's environment (made there on first use)."""
        if not self.python:
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pyenv.sh")], check=True,
                               stdout=subprocess.PIPE, text=True)
            self.python = r.stdout.strip().splitlines()[-1]
        return self.python

    def rows_path(self, suite):
        return self.out or os.path.join(RAW, f"{suite}_{self.tag}.jsonl")

    def round_order(self, cases, rnd):
        """The cases of round rnd (1-based): as given in odd rounds, reversed in even ones."""
        return list(cases) if rnd % 2 else list(reversed(cases))

    def timed(self, argv, tag, env=None, stdout_path=None):
        """Runs argv under /usr/bin/time -f %M in the work directory; returns (peak RSS KiB,
        seconds, started_utc, loadavg before, after). stdout goes to stdout_path (or a log),
        stderr to <tag>.log."""
        os.makedirs(self.work, exist_ok=True)
        rss = os.path.join(self.work, tag + ".rss")
        logp = os.path.join(self.work, tag + ".log")
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        before = open("/proc/loadavg").read().split()[:3]
        e = dict(os.environ)
        e.update(env or {})
        t0 = datetime.datetime.now().timestamp()
        with open(stdout_path or logp + ".out", "w") as out, open(logp, "w") as err:
            rc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss] + list(argv), env=e,
                                stdout=out, stderr=err, cwd=ROOT).returncode
        secs = datetime.datetime.now().timestamp() - t0
        after = open("/proc/loadavg").read().split()[:3]
        if rc != 0:
            tail = open(logp).read()[-2000:]
            raise RuntimeError(f"{shlex.join(argv)} exited {rc}:\n{tail}")
        kib = int(open(rss).read().split()[-1])
        return kib, secs, started, " ".join(before), " ".join(after)

    def row(self, suite, case, rnd, argv, timing, env=None, **fields):
        """A raw row: the suite's fields plus what every row carries."""
        kib, secs, started, before, after = timing
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
        cmd = " ".join(x for x in (envs, shlex.join(rel(a) if os.path.exists(a) else a
                                                    for a in argv)) if x)
        r = {"suite": suite, "case": case, "round": rnd, "machine": self.machine,
             "command": cmd, "peak_rss_kib": kib, "wall_s": round(secs, 2),
             "started_utc": started, "loadavg_before": before, "loadavg_after": after,
             "commit": self.commit}
        r.update(fields)
        return r


def append_row(path, row):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def metrics_summary(path):
    """The summary row of an `mxtrain train --metrics-out` file."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    s = [r for r in rows if r.get("summary")]
    if not s:
        raise RuntimeError(f"{path}: no summary row (did the run finish?)")
    return s[-1], [r for r in rows if not r.get("summary")]


def gpt_config(d_model, heads, d_ff, steps, path, base="configs/tiny.yaml", seq=256, batch=8,
               extra=None):
    """configs/tiny.yaml with the model shape, sequence, micro-batch and steps replaced and
    evaluation off: the trainer benchmark's GPT."""
    subs = {"d_model": d_model, "n_heads": heads, "d_ff": d_ff, "max_seq_len": seq,
            "seq_len": seq, "micro_batch_size": batch, "steps": steps, "eval_every": 100000,
            "eval_batches": 1}
    subs.update(extra or {})
    out = []
    for line in open(os.path.join(ROOT, base)):
        s = line.strip()
        key = s.split(":")[0] if ":" in s and not s.startswith("#") else None
        if key in subs and line.startswith("  "):
            line = f"  {key}: {subs[key]}\n"
        out.append(line)
    write_atomic(path, "".join(out))
    return path
