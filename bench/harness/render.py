"""bench/harness/render.py — every results table is rendered from committed raw rows.

A Markdown file marks each table it shows:

    <!-- table:NAME FILE [FILE ...] [key=value ...] -->
    ...the rendered table...
    <!-- /table -->

NAME is a renderer of a suite (`bash scripts/bench.sh list` names them all), the FILEs are
raw rows under docs/results/raw/, and key=value pairs are the renderer's options. `render`
rewrites what lies between the markers; `check` renders the same and fails, naming the file
and the table, when the committed text differs, so no figure can go stale. The files looked at
are README.md and docs/results/*.md (docs/results/README.md describes the markers and holds
no table).
"""
import glob
import os
import re

from core import ROOT, write_atomic

MARK = re.compile(r"<!-- table:(\S+)((?: [^>]*?)?) -->\n(.*?)<!-- /table -->", re.S)


def documents():
    """README.md and docs/results/*.md, less docs/results/README.md (which shows the markers
    in its text)."""
    return [os.path.join(ROOT, "README.md")] + sorted(
        p for p in glob.glob(os.path.join(ROOT, "docs", "results", "*.md"))
        if os.path.basename(p) != "README.md")


class TableError(Exception):
    pass


def render_one(renderers, name, argstr, where):
    if name not in renderers:
        raise TableError(f"{where}: unknown table `{name}` (bash scripts/bench.sh list)")
    files, opts = [], {}
    for a in argstr.split():
        if "=" in a:
            k, v = a.split("=", 1)
            opts[k] = v
        else:
            files.append(a)
    try:
        return renderers[name](files, opts).rstrip("\n") + "\n"
    except (OSError, ValueError, KeyError, IndexError, ZeroDivisionError, StopIteration) as e:
        raise TableError(f"{where}: table `{name}` {argstr.strip()}: {type(e).__name__}: {e}")


def process(renderers, write, errors=None):
    """Renders every marked table; returns [(file, table, committed, rendered)] of those that
    differ (after writing them when write). A table that cannot be rendered (its rows missing
    or malformed) is left as it is and its one-line reason appended to errors."""
    stale = []
    errors = [] if errors is None else errors
    for path in documents():
        text = open(path).read()
        rel = os.path.relpath(path, ROOT)

        def sub(m):
            try:
                new = render_one(renderers, m.group(1), m.group(2), rel)
            except TableError as e:
                errors.append(str(e))
                return m.group(0)
            body = "\n" + new + "\n"
            if m.group(3) != body:
                stale.append((rel, (m.group(1) + m.group(2)).strip(), m.group(3), body))
            return f"<!-- table:{m.group(1)}{m.group(2)} -->\n{body}<!-- /table -->"

        out = MARK.sub(sub, text)
        if write and out != text:
            write_atomic(path, out)
    return stale


def count_tables():
    return sum(len(MARK.findall(open(p).read())) for p in documents())
