"""A pytest plugin (loaded by conftest.py): after the run, the skipped tests grouped by reason,
one line per reason with its count, instead of one line per skipping location."""

from __future__ import annotations

from collections import Counter


def skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts = Counter(skip_reason(r) for r in skipped)
    terminalreporter.section(f"{len(skipped)} skipped, by reason")
    for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"{n:6d}  {reason}")
