"""BENCHMARKS.md from BENCHMARKS_HISTORY.md: `python -m dsv41_jax.bench_report [--check]`.

The history holds every device run as it was measured (its method, the benchmark's tables, the
A/B tables of probes, phase tables, the targets), oldest first. BENCHMARKS.md is the newest
figure of each (op, shape, implementation) of those tables, each row as written, grouped under
the run that measured it (its heading and `Device:` line), oldest first. A probe's rows of the
build an A/B compared against (implementation "... (before)") and the rows of what the project
no longer has (`RETIRED`) are history only.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

HEADER = "| op | shape | implementation | device µs | floor µs | vs floor |"
RULE = "|---|---|---|---|---|---|"
HISTORY = "BENCHMARKS_HISTORY.md"
CURRENT = "BENCHMARKS.md"

# Ops and implementations the project no longer has: a row whose op or implementation is named
# here stays in the history and is left out of BENCHMARKS.md. All are `python -m dsv41_jax.bench
# loop`'s, retired with the whole-decode-step custom call (its modes: one call replaying a cached
# CUDA graph, launching directly or captured by XLA; a call a layer; op by op) and its graph
# cache: a model calls the indexer one layer at a time inside its own jitted decode step, where
# the one call cannot be used, and in a serving loop it was no faster.
RETIRED = frozenset(
    {
        # ops (the loop's span, host wall and kernel sum, and its host-floor jits)
        "decode step span (pipelined)",
        "decode step host wall",
        "decode step kernel sum (same loop)",
        "publish (layer 20) span (pipelined)",
        "publish (layer 20) host wall",
        "select (consumer layer) span (pipelined)",
        "select (consumer layer) host wall",
        "same-signature jit host wall",
        "trivial jit host wall",
        # implementations (the step's modes and output forms the loop compared)
        "one call, direct launches",
        "one call, XLA-captured",
        "a call a layer",
        "decode_stacked (one output array)",
        "auto path (default), outputs kept",
        "one call, direct launches, outputs kept",
    }
)


@dataclasses.dataclass(frozen=True)
class Table:
    """A table of benchmark rows in a markdown file, with where it stands."""

    section: str  # the "## " heading above it ("" before the first)
    heading: str  # the nearest heading of any level above it
    device: str  # the "Device:" line under that heading, above the table ("" if none)
    rows: tuple[str, ...]  # its rows, as written


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def is_number(cell: str) -> bool:
    return cell.replace(".", "", 1).isdigit()


def tables(text: str) -> list[Table]:
    """Every table under HEADER in `text` whose device-µs cells are numbers (rows of other
    forms dropped), in file order. A heading of any level resets the `Device:` line."""
    found: list[tuple[Table, list[str]]] = []
    section = heading = device = ""
    rows: list[str] | None = None  # the rows of the table being read
    for line in text.splitlines():
        if line.startswith("#"):
            heading, device = line.lstrip("#").strip(), ""
            if line.startswith("## "):
                section = heading
        elif line.startswith("Device:"):
            device = line.strip()
        if line.strip() == HEADER:
            rows = []
            found.append((Table(section, heading, device, ()), rows))
        elif rows is not None and line.startswith("|"):
            c = cells(line)
            if len(c) == 6 and is_number(c[3]):
                rows.append(line.strip())
        elif rows is not None:
            rows = None  # a table ends at its first non-table line
    return [dataclasses.replace(t, rows=tuple(r)) for t, r in found if r]


def key(row: str) -> tuple[str, str, str]:
    """(op, shape, implementation) of a row."""
    op, shape, implementation = cells(row)[:3]
    return op, shape, implementation


def figures(row: str) -> tuple[float, float]:
    """(device µs, floor µs) of a row; a floor of "–" is 0."""
    us, floor = cells(row)[3:5]
    return float(us), float(floor) if is_number(floor) else 0.0


def retired(row: str) -> bool:
    """Whether a row measured something the project no longer has (`RETIRED`)."""
    op, _, implementation = key(row)
    return op in RETIRED or implementation in RETIRED


def current(text: str) -> list[tuple[Table, list[str]]]:
    """The newest row of each key, under the table that holds it, tables in file order; neither
    a probe's "(before)" rows nor retired ones."""
    newest: dict[tuple[str, str, str], tuple[int, int]] = {}
    found = tables(text)
    for t, table in enumerate(found):
        for r, row in enumerate(table.rows):
            if not key(row)[2].endswith("(before)") and not retired(row):
                newest[key(row)] = (t, r)
    kept: dict[int, list[int]] = {}
    for t, r in newest.values():
        kept.setdefault(t, []).append(r)
    return [(found[t], [found[t].rows[r] for r in sorted(kept[t])]) for t in sorted(kept)]


def render(text: str) -> str:
    """BENCHMARKS.md for the history `text`."""
    parts = [
        "# Benchmarks",
        "",
        "The newest measurement of each op, shape and implementation: device time per call, read",
        "from CUPTI kernel records (`python -m dsv41_jax.bench`), kernels only; the floor is the",
        "bytes that must move over the copy bandwidth of the same run. Rows are grouped by the run",
        "that measured them, oldest first: compare figures within a run. Generated from",
        f"{HISTORY} (each run whole: method, A/B tables, phases, targets) by",
        "`python -m dsv41_jax.bench_report`; do not edit, regenerate.",
    ]
    seen: dict[str, int] = {}
    for table, rows in current(text):
        title = table.section or table.heading
        if table.heading and table.heading != title:
            title = f"{title} — {table.heading}"
        seen[title] = seen.get(title, 0) + 1
        parts += ["", f"## {title}" + (f" (table {seen[title]})" if seen[title] > 1 else ""), ""]
        if table.device:
            parts += [table.device, ""]
        else:
            parts += [f"No `Device:` line: {HISTORY}'s section of this title says how it ran.", ""]
        parts += [HEADER, RULE, *rows]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dsv41_jax.bench_report",
        description=f"Write {CURRENT} from {HISTORY} (both in --root).",
    )
    ap.add_argument("--root", default=".", help="the folder holding both (default: here)")
    ap.add_argument(
        "--check", action="store_true", help=f"write nothing; exit 1 if {CURRENT} is stale"
    )
    args = ap.parse_args(argv)
    root = pathlib.Path(args.root)
    want = render((root / HISTORY).read_text())
    if args.check:
        if (root / CURRENT).read_text() != want:
            print(f"{CURRENT} is stale: run python -m dsv41_jax.bench_report", file=sys.stderr)
            return 1
        return 0
    (root / CURRENT).write_text(want)
    print(f"wrote {root / CURRENT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
