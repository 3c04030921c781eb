"""A benchmark row, the markdown table a run writes, and the runs of a saved table."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks import report


@dataclass
class Row:
    op: str
    shape: str
    impl: str
    us: float
    floor_us: float

    def __post_init__(self) -> None:  # one progress line per measured row
        print(f"bench: {self.op} | {self.shape} | {self.impl}: {self.us:.1f} us", flush=True)

    def md(self) -> str:
        ratio = f"{self.us / self.floor_us:.1f}x" if self.floor_us else "–"
        floor = f"{self.floor_us:.1f}" if self.floor_us else "–"
        cells = (self.op, self.shape, self.impl, f"{self.us:.1f}", floor)
        return "| " + " | ".join(cells) + f" | {ratio} |"


def markdown(device_line: str, rows: Sequence[Row]) -> str:
    """A run's table as `--out` writes it: the "Device:" line, then the rows under the header."""
    return "\n".join([device_line, "", report.HEADER, report.RULE, *[r.md() for r in rows]])


def read_runs(path: str) -> list[tuple[str, list[Row]]]:
    """Every benchmark table of a markdown file (as `--out` writes it, or
    BENCHMARKS_HISTORY.md, which holds one per run): (label, rows) in file order. The label is
    the heading above the table and the "Device:" line under that heading, if any."""
    runs: list[tuple[str, list[Row]]] = []
    with contextlib.redirect_stdout(io.StringIO()):  # a Row prints a progress line
        for table in report.tables(open(path).read()):
            rows = [Row(*report.key(r), *report.figures(r)) for r in table.rows]
            runs.append((" / ".join(filter(None, (table.heading, table.device))), rows))
    return runs


def read_table(path: str, section: str | None = None) -> tuple[list[Row], str]:
    """The rows of one run in a saved file and a plot title for them: the run whose label
    (`read_runs`) contains `section` (e.g. a commit id), or by default the newest (last) run
    with decode-step rows. ValueError when no run, or more than one, matches."""
    runs = read_runs(path)
    if section:
        chosen = [r for r in runs if section in r[0]]
        if len(chosen) != 1:
            labels = "\n  ".join(label for label, _ in (chosen or runs))
            what = "several runs match" if chosen else "no run matches"
            raise ValueError(f"{path}: {what} {section!r}:\n  {labels}")
    else:
        chosen = [r for r in runs if any(x.op.startswith("decode step") for x in r[1])][-1:]
        if not chosen:
            raise ValueError(f"{path}: no table with decode-step rows")
    label, rows = chosen[0]
    device = next((part for part in label.split(" / ") if part.startswith("Device:")), "")
    if device:
        where = device.removeprefix("Device: ").split(";")[0]
        commit = device.split("commit ")[1].split(";")[0] if "commit " in device else ""
        title = ", ".join(filter(None, ("V4.1 indexer step", where, commit)))
    else:
        title = f"V4.1 indexer step, {label}"
    return rows, title
