"""BENCHMARKS.md from BENCHMARKS_HISTORY.md: `python -m benchmarks.report [--check]`.

The history holds every device run as it was measured (its method, the benchmark's tables, the
A/B tables of probes, phase tables, the targets), oldest first. BENCHMARKS.md holds one table
per device kind (and per GPU count): the newest row of each (op, shape, implementation)
measured on that kind, with the date and commit of its run, ordered by op, then shape, fastest
first. A table's device kind is the one its `Device:` paragraph names, else the one its
heading, its section's heading or its section's text above it names (the first of these to
name exactly one); rows of tables that name none go to a "device not named" table, for the
keys no named kind has. A probe's rows of the build an A/B compared against (implementation
"... (before)") and the rows of what the project no longer has (`RETIRED`) are history only.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys

HEADER = "| op | shape | implementation | device µs | floor µs | vs floor |"
RULE = "|---|---|---|---|---|---|"
# BENCHMARKS.md's tables: the history's columns and the run each row comes from.
CURRENT_HEADER = HEADER + " run |"
CURRENT_RULE = RULE + "---|"
HISTORY = "BENCHMARKS_HISTORY.md"
CURRENT = "BENCHMARKS.md"
UNNAMED = "device not named"

# An NVIDIA data-centre GPU's name (H100, H200, B200, A100, ...; `nvidia-h200-x2` names H200).
KIND = re.compile(r"\b(?:GB|[ABHL])\d{2,3}\b", re.IGNORECASE)
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
COMMIT = re.compile(r"\b(?:commit|trees? of(?: commit)?) ([0-9a-f]{7,40})\b")
GPUS = re.compile(r"\b(\d+) GPUs\b")

# Ops and implementations the project no longer has: a row whose op or implementation is named here
# stays in the history and is left out of BENCHMARKS.md. All are the bench's former `loop` op's,
# retired with the whole-decode-step custom call (its modes: one call replaying a cached CUDA graph,
# launching directly or captured by XLA; a call a layer; op by op) and its graph cache: a model
# calls the indexer one layer at a time inside its own jitted decode step, where the one call cannot
# be used, and in a serving loop it was no faster.
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

    heading: str  # the nearest heading of any level above it
    device: str  # the first line of the "Device:" paragraph under that heading ("" if none)
    rows: tuple[str, ...]  # its rows, as written
    kind: str = ""  # the device kind it was measured on ("H200"; "" if none is named)
    date: str = ""  # its run's date ("" if none is written)
    commit: str = ""  # its run's commit ("" if none is written)

    @property
    def run(self) -> str:
        """The date and commit of its run, as BENCHMARKS.md names it."""
        return " ".join(filter(None, (self.date, self.commit))) or "–"


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def is_number(cell: str) -> bool:
    return cell.replace(".", "", 1).isdigit()


def kinds(text: str) -> set[str]:
    """The device kinds `text` names."""
    return {k.upper() for k in KIND.findall(text)}


def first(pattern: re.Pattern[str], *texts: str) -> str:
    """The first match of `pattern` (its group, if it has one) in the first text it matches."""
    for text in texts:
        if m := pattern.search(text):
            return m.group(m.re.groups)
    return ""


def tables(text: str) -> list[Table]:
    """Every table under HEADER in `text` whose device-µs cells are numbers (rows of other
    forms dropped), in file order, with its device kind and run (see the module's doc). A
    heading of any level resets the `Device:` paragraph; a "## " heading the section's text."""
    found: list[tuple[Table, list[str]]] = []
    section = heading = device = paragraph = ""
    prose: list[str] = []  # the section's lines above, outside tables
    in_paragraph = False  # reading the `Device:` paragraph
    rows: list[str] | None = None  # the rows of the table being read
    for line in text.splitlines():
        if not line.strip() or line.startswith(("|", "#")):
            in_paragraph = False
        elif in_paragraph:
            paragraph += " " + line.strip()
        if line.startswith("#"):
            heading, device, paragraph = line.lstrip("#").strip(), "", ""
            if line.startswith("## "):
                section, prose = heading, []
        elif line.startswith("Device:"):
            device = paragraph = line.strip()
            in_paragraph = True
        if not line.startswith("|"):
            prose.append(line)
        if line.strip() == HEADER:
            rows = []
            places = (paragraph, heading, section, "\n".join(prose))
            named = [k for k in map(kinds, places) if len(k) == 1]
            table = Table(
                heading,
                device,
                (),
                kind=named[0].pop() if named else "",
                date=first(DATE, *places),
                commit=first(COMMIT, *places),
            )
            found.append((table, rows))
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


def title(kind: str, shape: str) -> str:
    """The BENCHMARKS.md table of a row measured on `kind` ("" if none named) at `shape`."""
    gpus = GPUS.search(shape)
    return (kind or UNNAMED) + (f", {gpus.group(1)} GPUs" if gpus else "")


def natural(text: str) -> tuple[tuple[int, float, str], ...]:
    """A sort key that orders the numbers in `text` by value (16K before 128K before 1M), the
    rest regardless of case."""
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20}
    parts = re.findall(r"(\d+(?:\.\d+)?)([KM]?)|(\D)", text)
    return tuple(
        (0, float(n) * scale[unit], "") if n else (1, 0.0, ch.casefold()) for n, unit, ch in parts
    )


def order(row: str) -> tuple[object, ...]:
    """A row's place in its BENCHMARKS.md table: by op, then shape, then device µs."""
    op, shape, implementation = key(row)
    return natural(op), natural(shape), figures(row)[0], implementation


def current(text: str) -> dict[str, list[tuple[Table, str]]]:
    """BENCHMARKS.md's tables for the history `text`: title -> (the history table, row) of the
    newest row of each key measured on the title's kind and GPU count, ordered by op, shape and
    device µs; titles by kind, then GPU count, "device not named" last. Neither a probe's
    "(before)" rows nor retired ones."""
    newest: dict[tuple[str, tuple[str, str, str]], tuple[Table, str]] = {}
    for table in tables(text):
        for row in table.rows:
            if not key(row)[2].endswith("(before)") and not retired(row):
                newest[(title(table.kind, key(row)[1]), key(row))] = (table, row)
    named = {k for (t, k), (table, _) in newest.items() if table.kind}
    out: dict[str, list[tuple[Table, str]]] = {}
    for (t, k), (table, row) in newest.items():
        if table.kind or k not in named:
            out.setdefault(t, []).append((table, row))
    for rows in out.values():
        rows.sort(key=lambda tr: order(tr[1]))
    return dict(sorted(out.items(), key=lambda t: (t[0].startswith(UNNAMED), natural(t[0]))))


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + "s" * (n != 1)


def render(text: str) -> str:
    """BENCHMARKS.md for the history `text`."""
    parts = [
        "# Benchmarks",
        "",
        "How fast each op runs, by device kind: one table per kind (and per GPU count) holding",
        "the newest measurement of every op, shape and implementation on that kind, ordered by",
        "op, then shape, fastest first. Device time per call, read from CUPTI kernel records",
        "(`python -m benchmarks`): kernels only, the median of repeated calls over rotating",
        "inputs; the floor is the bytes that must move over the copy bandwidth measured in the",
        "same run. `run` is the date and commit of the run a row comes from: rows of one run",
        "compare directly; between runs the code and the machine's load differ as well.",
        "",
        "A run's device kind is the one its `Device:` line names, else its headings or text;",
        f'rows of runs that name none are under "{UNNAMED}", only where no named kind has',
        "a figure. The method, every run whole and the A/B tables behind each choice:",
        f"{HISTORY}. Generated from it by `python -m benchmarks.report`; do not edit,",
        "regenerate.",
    ]
    for name, rows in current(text).items():
        runs = sorted({table.run for table, _ in rows})
        parts += [
            "",
            f"## {name}",
            "",
            f"{plural(len(rows), 'row')}, from {plural(len(runs), 'run')}.",
            "",
        ]
        parts += [CURRENT_HEADER, CURRENT_RULE]
        parts += ["| " + " | ".join([*cells(row), table.run]) + " |" for table, row in rows]
    return "\n".join(parts) + "\n"


def published(text: str) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """BENCHMARKS.md's figures: (table title, op, shape, implementation) -> (device µs, floor
    µs)."""
    out: dict[tuple[str, str, str, str], tuple[float, float]] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
        elif line.startswith("|") and line.strip() not in (CURRENT_HEADER, CURRENT_RULE):
            row = "|".join(line.split("|")[:-2]) + "|"  # without the run column
            out[(name, *key(row))] = figures(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
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
            print(f"{CURRENT} is stale: run python -m benchmarks.report", file=sys.stderr)
            return 1
        return 0
    (root / CURRENT).write_text(want)
    print(f"wrote {root / CURRENT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
