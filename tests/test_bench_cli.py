"""The benchmark CLI's arguments and its plotting of saved tables (CPU: nothing is measured)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from benchmarks import args, cli, table, timing

HEADER = (
    "| op | shape | implementation | device µs | floor µs | vs floor |\n|---|---|---|---|---|---|"
)
STEP = "decode step (publish + 4 selects)"
ROOT = Path(__file__).parents[1]


def saved_runs(tmp_path):
    """Two runs in one file (as BENCHMARKS_HISTORY.md holds them), and a table of another kind."""
    text = f"""# Benchmarks

## First run (commit aaaaaaa)

Device: NVIDIA H200; measured copy bandwidth 4.30 TB/s; date 2026-11-29; commit aaaaaaa; jax 0.11.2.

{HEADER}
| {STEP} | bs1 x 16K | sparse path | 100.0 | 2.5 | 40.0x |
| topk k=512 | [8, 16K] | ffi | 11.0 | 0.1 | 90.0x |

| shape | torch µs | sparse µs | × | mask µs | × |
|---|---|---|---|---|---|
| bs1 x 16K | 622 | 177 | 3.5 | 191 | 3.3 |

## Second run (commit bbbbbbb)

Device: NVIDIA H200; measured copy bandwidth 4.28 TB/s; date 2026-12-01; commit bbbbbbb; jax 0.11.2.

{HEADER}
| {STEP} | bs1 x 16K | sparse path | 90.0 | 2.5 | 36.0x |
| {STEP} | bs8 x 128K | sparse path | 200.0 | 48.5 | 4.1x |

## Third run, no step rows (commit ccccccc)

{HEADER}
| topk k=512 | [8, 16K] | ffi | 10.0 | 0.1 | 80.0x |
"""
    path = tmp_path / "runs.md"
    path.write_text(text)
    return str(path)


def test_usage_names_the_module_and_what_measuring_needs(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m benchmarks ")
    assert "Measuring needs an NVIDIA GPU" in out and "torch" in out and "dsv41_jax[bench]" in out


def test_options_and_their_defaults():
    options, _ = args.parse_args([])
    assert (options.quick, options.breakdown, options.topk_impls) == (False, False, "ffi,pallas")
    assert (options.out, options.plots, options.plots_from, options.section) == ("", "", "", "")
    options, _ = args.parse_args(["topk", "--quick", "--breakdown", "--topk-impls", "ffi"])
    assert (options.quick, options.breakdown, options.topk_impls) == (True, True, "ffi")
    assert args.parse_args(["--topk-impls", " pallas, ffi,"])[0].topk_impls == "pallas,ffi"


def test_ops_from_positionals_and_only():
    assert args.parse_args([])[1] == set(args.DEFAULT_OPS) and "sharded" not in args.DEFAULT_OPS
    assert args.parse_args(["topk", "--only", "step, select"])[1] == {"topk", "step", "select"}
    assert args.parse_args(["sharded"])[1] == {"sharded"}


@pytest.mark.parametrize(
    "argv,message",
    [
        (["topk", "fast"], "unknown op(s): fast (choose from logits, sort,"),
        (["--only", "topk,,steps"], "unknown op(s): steps"),
        (["loop"], "unknown op(s): loop (choose from logits, sort, amax, topk, select, step, mod"),
        (["--plots-from", "BENCHMARKS.md"], "--plots-from needs --plots DIR"),
        (["--section", "abc"], "--section selects a run of --plots-from FILE"),
        (["--topk-impls", "ffi,bogus"], "--topk-impls: bogus (a comma list of ffi, pallas)"),
        (["--topk-impls", " , "], "--topk-impls: none given"),
        (["--plots-from", "no-such.md", "--plots", "out"], "'no-such.md' does not exist"),
        (["--plots-from", ".", "--plots", "out"], "'.' is a folder"),
    ],
)
def test_bad_arguments_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        args.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m benchmarks ") and message in err


def test_read_table_takes_one_run(tmp_path):
    path = saved_runs(tmp_path)
    labels = [label for label, _ in table.read_runs(path)]
    assert len(labels) == 3 and "commit aaaaaaa" in labels[0]  # the other table is not a run
    rows, title = table.read_table(path)  # the newest run with decode-step rows
    assert [(r.shape, r.us) for r in rows] == [("bs1 x 16K", 90.0), ("bs8 x 128K", 200.0)]
    assert title == "V4.1 indexer step, NVIDIA H200, bbbbbbb"
    rows, title = table.read_table(path, "aaaaaaa")
    assert [r.us for r in rows] == [100.0, 11.0] and title.endswith("aaaaaaa")
    with pytest.raises(ValueError, match="no run matches 'zzz'"):
        table.read_table(path, "zzz")
    with pytest.raises(ValueError, match="several runs match 'commit'"):
        table.read_table(path, "commit")


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_plots_from_writes_only_where_plots_says(tmp_path, capsys):
    path = saved_runs(tmp_path)
    out = tmp_path / "plots"
    cli.main(["--plots-from", path, "--plots", str(out), "--section", "bbbbbbb"])
    assert sorted(p.name for p in out.iterdir()) == ["step_split.png", "step_time.png"]
    assert "plotting V4.1 indexer step, NVIDIA H200, bbbbbbb (2 rows)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no run matches"):
        cli.main(["--plots-from", path, "--plots", str(out), "--section", "zzz"])


def test_plots_without_matplotlib_are_a_usage_error(tmp_path, capsys, monkeypatch):
    """Without matplotlib, --plots (measuring or --plots-from) stops at the command line with
    what to install, not with an ImportError traceback after the run."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec: not installed
    path = saved_runs(tmp_path)
    for argv in (["--plots-from", path, "--plots", str(tmp_path)], ["step", "--plots", "x"]):
        with pytest.raises(SystemExit) as e:
            args.parse_args(argv)
        assert e.value.code == 2
        assert "--plots needs matplotlib (pip install matplotlib)" in capsys.readouterr().err


def test_measuring_needs_a_gpu():
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU is here: main() would measure")
    with pytest.raises(SystemExit, match="measures on an NVIDIA GPU"):
        cli.main(["topk"])


def test_shapes_option_names_batch_and_context():
    options, _ = args.parse_args(["step", "--shapes", "bs8x1M, bs64x128k"])
    assert options.shapes == ((8, 1 << 20), (64, 131072))
    assert args.parse_args([])[0].shapes == ()
    assert args.pick_shapes((), True, ((1, 2),), ((3, 4),)) == ((1, 2),)
    assert args.pick_shapes((), False, ((1, 2),), ((3, 4),)) == ((3, 4),)
    assert args.pick_shapes(((8, 9),), True, ((1, 2),), ((3, 4),)) == ((8, 9),)


def test_parse_shapes():
    assert args.parse_shapes("bs8x1M,bs64x128K") == ((8, 1 << 20), (64, 131072))
    assert args.parse_shapes(" BS1 x 16k ,, bs2x3M") == ((1, 16384), (2, 3 << 20))
    assert args.parse_shapes("") == ()
    with pytest.raises(ValueError, match="shape 'bs8x0K' is not bs<batch>x<context>K|M"):
        args.parse_shapes("bs1x16K,bs8x0K")


@pytest.mark.parametrize("bad", ["8x1M", "bs8x1G", "bs0x16K", "bs8"])
def test_bad_shapes_are_usage_errors(capsys, bad):
    with pytest.raises(SystemExit) as e:
        args.parse_args(["--shapes", bad])
    assert e.value.code == 2 and f"--shapes: shape '{bad}'" in capsys.readouterr().err


def test_results_are_checked_before_anything_is_timed(monkeypatch):
    """A call whose result differs from what it is checked against raises WrongResult, and its
    kernels are never timed; equal pytrees pass."""
    import jax.numpy as jnp

    timed = []
    monkeypatch.setattr(
        timing, "kernel_time_us", lambda run, calls, breakdown: timed.append(calls) or 1.0
    )
    x = jnp.arange(6, dtype=jnp.int32).reshape(2, 3)
    assert timing.jax_time_us(lambda a: {"s": a + 0}, [(x,)], want={"s": x}) == 1.0
    with pytest.raises(timing.WrongResult, match="topk .* ffi"):
        timing.jax_time_us(lambda a: a.at[1, 2].set(-1), [(x,)], want=x, what="topk [2, 3] ffi")
    with pytest.raises(timing.WrongResult):
        timing.check_result((x, x), (x,), "fewer arrays")
    assert timed == [20]


def test_module_runs_as_a_script():
    """`python -m benchmarks` is the package's __main__: on a CPU backend it stops with the
    GPU message (exit status 1), before anything is measured."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "topk"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    message = "python -m benchmarks measures on an NVIDIA GPU; JAX's backend here is 'cpu'"
    assert message in done.stderr
