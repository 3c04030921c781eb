"""BENCHMARKS.md is generated from BENCHMARKS_HISTORY.md (dsv41_jax/bench_report.py): the
committed file is current, and the rules it is made by."""

from __future__ import annotations

from pathlib import Path

from dsv41_jax import bench_report

ROOT = Path(__file__).parents[1]
H = bench_report.HEADER + "\n" + bench_report.RULE


def test_committed_benchmarks_are_generated_from_the_history():
    history = (ROOT / "BENCHMARKS_HISTORY.md").read_text()
    assert (ROOT / "BENCHMARKS.md").read_text() == bench_report.render(history), (
        "BENCHMARKS.md is stale: run python -m dsv41_jax.bench_report"
    )
    assert bench_report.main(["--root", str(ROOT), "--check"]) == 0


HISTORY = f"""# Benchmark history

## First run (2026-01-01, commit aaaaaaa)

Device: GPU X; date 2026-01-01; commit aaaaaaa.

{H}
| topk | [8, 16K] | ffi | 10.0 | 0.1 | 100.0x |
| topk | [8, 16K] | torch.topk (baseline) | 90.0 | 0.1 | 900.0x |
| select | bs8 x 128K | sparse path | 20.0 | 4.0 | 5.0x |
| not a row | – | – | – | – | – |

## Second run (2026-01-02, commit bbbbbbb)

An A/B of a probe, then the benchmark's table.

{H}
| topk | [8, 16K] | ffi (before) | 10.0 | 0.1 | 100.0x |
| topk | [8, 16K] | ffi | 8.0 | 0.1 | 80.0x |

### A subsection

Device: GPU X; date 2026-01-02; commit bbbbbbb.

{H}
| select | bs8 x 128K | sparse path | 18.0 | 4.0 | 4.5x |
| select | bs8 x 128K | mask path | 60.0 | 4.0 | 15.0x |
"""


def test_newest_row_of_each_key_under_its_run_oldest_first(tmp_path):
    text = bench_report.render(HISTORY)
    assert text.startswith("# Benchmarks\n")
    body = text[text.index("\n## ") :]
    assert (
        body
        == f"""
## First run (2026-01-01, commit aaaaaaa)

Device: GPU X; date 2026-01-01; commit aaaaaaa.

{H}
| topk | [8, 16K] | torch.topk (baseline) | 90.0 | 0.1 | 900.0x |

## Second run (2026-01-02, commit bbbbbbb)

No `Device:` line: BENCHMARKS_HISTORY.md's section of this title says how it ran.

{H}
| topk | [8, 16K] | ffi | 8.0 | 0.1 | 80.0x |

## Second run (2026-01-02, commit bbbbbbb) — A subsection

Device: GPU X; date 2026-01-02; commit bbbbbbb.

{H}
| select | bs8 x 128K | sparse path | 18.0 | 4.0 | 4.5x |
| select | bs8 x 128K | mask path | 60.0 | 4.0 | 15.0x |
"""
    )
    (tmp_path / "BENCHMARKS_HISTORY.md").write_text(HISTORY)
    assert bench_report.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / "BENCHMARKS.md").read_text() == text
    assert bench_report.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "BENCHMARKS.md").write_text(text + "edited\n")
    assert bench_report.main(["--root", str(tmp_path), "--check"]) == 1


def test_retired_rows_stay_in_the_history_only():
    """Rows of what the project no longer has (`bench_report.RETIRED`: by op or by
    implementation) are left out, the run's other rows kept; a run left with none is gone."""
    history = f"""## A run

Device: GPU X.

{H}
| decode step (publish + 4 selects) | bs8 x 128K | auto path (default) | 139.0 | 48.3 | 2.9x |
| decode step span (pipelined) | bs8 x 128K | auto path (default) | 145.6 | 48.3 | 3.0x |
| trivial jit host wall | bs8 x 128K | jit(x + 1) [8, 16K] | 49.5 | – | – |

## A loop run

{H}
| decode step host wall | bs1 x 16K | op by op | 158.5 | – | – |
| decode step (publish + 4 selects) | bs1 x 16K | one call, direct launches | 66.5 | 2.5 | 26.4x |
"""
    text = bench_report.render(history)
    assert text[text.index("\n## ") :] == (
        "\n## A run\n\nDevice: GPU X.\n\n"
        f"{H}\n| decode step (publish + 4 selects) | bs8 x 128K | auto path (default) | 139.0 | "
        "48.3 | 2.9x |\n"
    )
    assert {"decode step span (pipelined)", "a call a layer"} <= bench_report.RETIRED
    assert "auto path (default)" not in bench_report.RETIRED
