#!/usr/bin/env python3
"""Structure report of the tree, rerunnable anywhere.

    tools/structure_report.py [DIR] [--top N] [--pairs N]

DIR is a checkout (default: this tree) or an export of another revision, e.g.
`git archive main | tar -x -C /tmp/main && tools/structure_report.py /tmp/main`. Prints:

1. the largest source files (`wc -l`), and how many pass the house limit of ~600 lines
   (docs/architecture.md "House style": a file past ~600 lines is two components);
2. the pairs of places that share six or more identical lines (after folding white space and
   skipping blank lines, comments, include/import lines and lone punctuation, like the machine's
   `duplicates` command does), most shared first; when `duplicates` is installed its own summary
   line follows, for comparison;
3. the mirror of the tests (docs/architecture.md "House style"): headers with no `tests/<dir>/<name>_test.cpp`,
   and unit tests whose first include is not the header they are named after.

Only the standard library; reads files, writes nothing.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".py", ".cmake", ".proto", ".sh", ".lua")
SOURCE_NAMES = ("CMakeLists.txt",)
SKIP_PARTS = ("tests/fuzz/corpus/", "/testdata/")
RUN_LINES = 6
# A run of lines found in more places than this is a common idiom, not a copy (the same limit
# as `duplicates`).
MOST_PLACES = 8
HOUSE_LIMIT = 600


def list_files(top):
    """Tracked files of a git checkout, else every file below top (relative paths)."""
    if os.path.isdir(os.path.join(top, ".git")) or os.path.isfile(os.path.join(top, ".git")):
        out = subprocess.run(["git", "-C", top, "ls-files"], capture_output=True, text=True,
                             check=True).stdout
        names = out.splitlines()
    else:
        names = []
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
            for f in files:
                names.append(os.path.relpath(os.path.join(root, f), top))
    keep = []
    for n in sorted(names):
        if any(p in n for p in SKIP_PARTS) or n.startswith("build"):
            continue
        if n.endswith(SOURCE_SUFFIXES) or os.path.basename(n) in SOURCE_NAMES:
            if os.path.isfile(os.path.join(top, n)):
                keep.append(n)
    return keep


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


COMMENT = re.compile(r"^(//|#(?!\s*(if|else|elif|endif|define|pragma))|--|/\*|\*)")
IMPORT = re.compile(r"^(#\s*include\b|import\b|from\s+\S+\s+import\b)")
PUNCT = re.compile(r"^[\s{}()\[\];,:]*$")


def significant(lines):
    """(folded line, 1-based line number) of the lines that count."""
    out = []
    for i, raw in enumerate(lines, 1):
        s = " ".join(raw.split())
        if not s or PUNCT.match(s) or COMMENT.match(s) or IMPORT.match(s):
            continue
        out.append((s, i))
    return out


def duplicate_pairs(top, files):
    sig = {f: significant(read_lines(os.path.join(top, f))) for f in files}
    where = collections.defaultdict(list)
    for f, lines in sig.items():
        for i in range(len(lines) - RUN_LINES + 1):
            key = tuple(l for l, _ in lines[i:i + RUN_LINES])
            where[key].append((f, i))
    # Matching windows on one diagonal (same two files, same offset between them) that follow
    # each other form one run.
    diagonals = collections.defaultdict(set)
    for places in where.values():
        if len(places) < 2 or len(places) > MOST_PLACES:
            continue
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (f1, i1), (f2, i2) = sorted((places[a], places[b]))
                if f1 == f2 and abs(i1 - i2) < RUN_LINES:
                    continue
                diagonals[(f1, f2, i2 - i1)].add(i1)
    runs = []
    for (f1, f2, delta), starts in diagonals.items():
        starts = sorted(starts)
        begin = prev = starts[0]
        for s in starts[1:] + [None]:
            if s is not None and s == prev + 1:
                prev = s
                continue
            n = prev - begin + RUN_LINES
            a, b = sig[f1], sig[f2]
            runs.append((n, f1, a[begin][1], a[prev + RUN_LINES - 1][1],
                         f2, b[begin + delta][1], b[prev + delta + RUN_LINES - 1][1]))
            if s is not None:
                begin = prev = s
    runs.sort(key=lambda r: (-r[0], r[1], r[2]))
    return runs, len(files)


def mirror(top, files):
    """Headers without a mirrored test, and tests whose first include is not their header."""
    code_dirs = ("common/", "sender/", "receiver/", "feed/", "tools/")
    headers = [f for f in files if f.endswith(".hpp") and f.startswith(code_dirs)]
    tests = set(f for f in files if f.startswith("tests/") and f.endswith("_test.cpp"))
    untested = []
    for h in headers:
        d, name = os.path.split(h)
        if f"tests/{d}/{name[:-4]}_test.cpp" not in tests:
            untested.append(h)
    misplaced = []
    for t in sorted(tests):
        if t.startswith("tests/linkem/") or t.startswith("tests/sim/"):
            continue  # the emulator mirrors its own tree; the simulation is no component
        first = next((l for l in read_lines(os.path.join(top, t)) if l.startswith("#include")), "")
        m = re.match(r'#include "(.*)"', first)
        inc = m.group(1) if m else first
        want_dir = os.path.dirname(t)[len("tests/"):]
        base = os.path.basename(t)[:-len("_test.cpp")]
        if os.path.dirname(inc) != want_dir or not base.startswith(os.path.basename(inc)[:-4]):
            misplaced.append((t, inc))
    return headers, untested, misplaced


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--top", type=int, default=15, help="largest files listed")
    ap.add_argument("--pairs", type=int, default=25, help="duplicate pairs listed")
    a = ap.parse_args()
    top = os.path.abspath(a.dir)
    files = list_files(top)

    sizes = sorted(((len(read_lines(os.path.join(top, f))), f) for f in files), reverse=True)
    code = [s for s in sizes if s[1].endswith((".cpp", ".hpp"))]
    print(f"== largest source files of {top} (wc -l)")
    for n, f in sizes[:a.top]:
        print(f"{n:7d}  {f}")
    over = [f for n, f in code if n > HOUSE_LIMIT]
    print(f"C++ files over {HOUSE_LIMIT} lines: {len(over)} of {len(code)}; "
          f"C++ lines in all: {sum(n for n, _ in code)}")

    runs, nfiles = duplicate_pairs(top, files)
    print(f"\n== pairs of places sharing {RUN_LINES} or more identical lines: {len(runs)} "
          f"({sum(r[0] for r in runs)} lines), {nfiles} files read")
    for n, f1, a1, b1, f2, a2, b2 in runs[:a.pairs]:
        print(f"{n:4d}  {f1}:{a1}-{b1} ~ {f2}:{a2}-{b2}")
    if len(runs) > a.pairs:
        print(f"(+{len(runs) - a.pairs} more pairs)")
    if shutil.which("duplicates"):
        out = subprocess.run(["duplicates", "--repo", top, "--seconds", "120"],
                             capture_output=True, text=True).stdout.splitlines()
        print("`duplicates` (identical or same shape): " + (out[0] if out else "no output"))

    headers, untested, misplaced = mirror(top, files)
    print(f"\n== tests mirroring the tree: {len(headers) - len(untested)} of {len(headers)} "
          f"headers have tests/<dir>/<name>_test.cpp")
    print(f"tests not at their header's mirror path or not including it first: {len(misplaced)}")
    for t, inc in misplaced:
        print(f"      {t} (first include: {inc or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
