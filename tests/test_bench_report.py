"""BENCHMARKS.md is generated from BENCHMARKS_HISTORY.md (benchmarks/report.py): the
committed file is current, and the rules it is made by."""

from __future__ import annotations

from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).parents[1]
H = report.HEADER + "\n" + report.RULE
C = report.CURRENT_HEADER + "\n" + report.CURRENT_RULE


def test_committed_benchmarks_are_generated_from_the_history():
    history = (ROOT / "BENCHMARKS_HISTORY.md").read_text()
    assert (ROOT / "BENCHMARKS.md").read_text() == report.render(history), (
        "BENCHMARKS.md is stale: run python -m benchmarks.report"
    )
    assert report.main(["--root", str(ROOT), "--check"]) == 0


def test_committed_benchmarks_have_one_table_a_device_kind():
    text = (ROOT / "BENCHMARKS.md").read_text()
    titles = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert titles[:2] == ["H100", "H200"] and len(titles) == len(set(titles))
    assert all(t.split(",")[0] in ("H100", "H200") for t in titles), titles
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(report.published(text)) == len(rows) - len(titles)


HISTORY = f"""# Benchmark history

## First run (2026-01-01, commit aaaaaaa)

Device: NVIDIA H200; date 2026-01-01;
commit aaaaaaa.

{H}
| topk | [8, 128K] | ffi | 12.0 | 1.0 | 12.0x |
| topk | [8, 16K] | ffi | 10.0 | 0.1 | 100.0x |
| topk | [8, 16K] | torch.topk (baseline) | 90.0 | 0.1 | 900.0x |
| select | bs8 x 128K | sparse path | 20.0 | 4.0 | 5.0x |
| not a row | – | – | – | – | – |

## Second run (2026-01-02, H200, commit bbbbbbb)

An A/B of a probe, then the benchmark's table.

{H}
| topk | [8, 16K] | ffi (before) | 10.0 | 0.1 | 100.0x |
| topk | [8, 16K] | ffi | 8.0 | 0.1 | 80.0x |

### A subsection

Device: NVIDIA H100 80GB HBM3; date 2026-01-03; tree of commit ccccccc (the line printed
ddddddd).

{H}
| select | bs8 x 128K | sparse path | 18.0 | 4.0 | 4.5x |
| select | bs8 x 128K | mask path | 60.0 | 4.0 | 15.0x |
| DCP select | bs64 x 128K, 2 GPUs | pmax | 600.0 | 200.0 | 3.0x |

## Third run (commit eeeeeee)

No device named here.

{H}
| topk | [8, 16K] | ffi | 7.0 | 0.1 | 70.0x |
| sort | [8, 2048] | ffi | 4.0 | 0.1 | 40.0x |
"""


def test_newest_row_of_each_key_a_device_kind():
    text = report.render(HISTORY)
    assert text.startswith("# Benchmarks\n")
    body = text[text.index("\n## ") :]
    assert (
        body
        == f"""
## H100

2 rows, from 1 run.

{C}
| select | bs8 x 128K | sparse path | 18.0 | 4.0 | 4.5x | 2026-01-03 ccccccc |
| select | bs8 x 128K | mask path | 60.0 | 4.0 | 15.0x | 2026-01-03 ccccccc |

## H100, 2 GPUs

1 row, from 1 run.

{C}
| DCP select | bs64 x 128K, 2 GPUs | pmax | 600.0 | 200.0 | 3.0x | 2026-01-03 ccccccc |

## H200

4 rows, from 2 runs.

{C}
| select | bs8 x 128K | sparse path | 20.0 | 4.0 | 5.0x | 2026-01-01 aaaaaaa |
| topk | [8, 16K] | ffi | 8.0 | 0.1 | 80.0x | 2026-01-02 bbbbbbb |
| topk | [8, 16K] | torch.topk (baseline) | 90.0 | 0.1 | 900.0x | 2026-01-01 aaaaaaa |
| topk | [8, 128K] | ffi | 12.0 | 1.0 | 12.0x | 2026-01-01 aaaaaaa |

## device not named

1 row, from 1 run.

{C}
| sort | [8, 2048] | ffi | 4.0 | 0.1 | 40.0x | eeeeeee |
"""
    )
    published = report.published(text)
    assert published[("H200", "topk", "[8, 16K]", "ffi")] == (8.0, 0.1)
    assert published[("H100", "select", "bs8 x 128K", "mask path")] == (60.0, 4.0)
    assert published[("device not named", "sort", "[8, 2048]", "ffi")] == (4.0, 0.1)
    assert len(published) == 8


def test_main_writes_and_checks(tmp_path):
    (tmp_path / "BENCHMARKS_HISTORY.md").write_text(HISTORY)
    assert report.main(["--root", str(tmp_path)]) == 0
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert text == report.render(HISTORY)
    assert report.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "BENCHMARKS.md").write_text(text + "edited\n")
    assert report.main(["--root", str(tmp_path), "--check"]) == 1


def test_a_tables_device_kind_is_the_first_place_naming_one():
    """The `Device:` paragraph, then the nearest heading, the section's heading, the section's
    text above the table; a place naming two kinds says nothing."""
    row = "| topk | [8, 16K] | ffi | 8.0 | 0.1 | 80.0x |"
    history = f"""## H200 run (2026-01-01)

Device: NVIDIA H100 80GB HBM3.

{H}
{row}

### On the other card (H200)

{H}
{row}

### Both cards

Device: NVIDIA H200 and NVIDIA H100 (each named per table).

{H}
{row}

## A run on `nvidia-h100-x1`, not the H200 nor B200

{H}
{row}

## A run on the machine `nvidia-h200-x2`

{H}
{row}
"""
    found = report.tables(history)
    assert [t.kind for t in found] == ["H100", "H200", "H200", "", "H200"]
    assert [t.run for t in found] == ["2026-01-01"] * 3 + ["–", "–"]


def test_rows_order_by_op_then_shape_then_time():
    rows = [
        "| topk | [64, 16K] | ffi | 9.0 | 1.0 | 9.0x |",
        "| topk | [8, 1024K] | ffi | 30.0 | 1.0 | 30.0x |",
        "| topk | [8, 16K] | torch | 50.0 | 1.0 | 50.0x |",
        "| topk | [8, 2048] | ffi | 4.0 | 1.0 | 4.0x |",
        "| topk | [8, 16K] | ffi | 5.0 | 1.0 | 5.0x |",
        "| DCP | bs8 x 16K | ffi | 5.0 | 1.0 | 5.0x |",
        "| block_amax | bs8 x 16K | ffi | 5.0 | 1.0 | 5.0x |",
    ]
    ordered = sorted(rows, key=report.order)
    assert [report.key(r)[:2] for r in ordered] == [
        ("block_amax", "bs8 x 16K"),
        ("DCP", "bs8 x 16K"),
        ("topk", "[8, 2048]"),
        ("topk", "[8, 16K]"),
        ("topk", "[8, 16K]"),
        ("topk", "[8, 1024K]"),
        ("topk", "[64, 16K]"),
    ]
    assert report.key(ordered[3])[2] == "ffi"


def test_retired_rows_stay_in_the_history_only():
    """Rows of what the project no longer has (`report.RETIRED`: by op or by
    implementation) are left out, the run's other rows kept; a kind left with none is gone."""
    history = f"""## A run

Device: NVIDIA H200.

{H}
| decode step (publish + 4 selects) | bs8 x 128K | auto path (default) | 139.0 | 48.3 | 2.9x |
| decode step span (pipelined) | bs8 x 128K | auto path (default) | 145.6 | 48.3 | 3.0x |
| trivial jit host wall | bs8 x 128K | jit(x + 1) [8, 16K] | 49.5 | – | – |

## A loop run

Device: NVIDIA H100.

{H}
| decode step host wall | bs1 x 16K | op by op | 158.5 | – | – |
| decode step (publish + 4 selects) | bs1 x 16K | one call, direct launches | 66.5 | 2.5 | 26.4x |
"""
    text = report.render(history)
    assert text[text.index("\n## ") :] == (
        f"\n## H200\n\n1 row, from 1 run.\n\n{C}\n| decode step (publish + 4 selects) | "
        "bs8 x 128K | auto path (default) | 139.0 | 48.3 | 2.9x | – |\n"
    )
    assert {"decode step span (pipelined)", "a call a layer"} <= report.RETIRED
    assert "auto path (default)" not in report.RETIRED
