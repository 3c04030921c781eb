"""dsv41_jax.info: which implementation each op takes on this machine, and why others decline."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from devices import SM80

import dsv41_jax as dj
from dsv41_jax import _ext, info, status


def sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def no_cuda_here(reason: str) -> bool:
    """A CUDA implementation's decline on this machine: no GPU where the extension is built, the
    missing extension where it is not (make CUDA=0)."""
    if _ext.available():
        return "CUDA GPU" in reason
    return "extension (_dsv41_jax_ext) is not installed" in reason or "not built" in reason


def test_explain_names_the_choice_and_the_declines_on_cpu():
    if jax.default_backend() == "gpu":
        pytest.skip("CPU view")
    blocks = sds((8, 4096), jnp.float32)
    lens = sds((8,), jnp.int32)
    (choice,) = info.explain(dj.select_candidate_blocks, blocks, lens, num_candidates=64)
    assert choice.op == "select_candidate_blocks" and choice.implementation == "reference"
    # Candidate rows of one CTA try the CUDA selects first (they measured faster there).
    assert [name for name, _ in choice.declined] == ["ffi", "pallas"]
    assert no_cuda_here(choice.declined[0][1]) and "select_candidate_blocks: reference" in str(
        choice
    )
    assert choice.declined[1][1] == (
        "select_candidate_blocks pallas: the Mosaic GPU kernel needs a CUDA GPU backend"
    )
    for n in (4096, 40000):  # top-k rows: the CUDA selects first
        (plain,) = info.explain(dj.topk, sds((8, n), jnp.float32), sds((8,), jnp.int32), 64)
        assert [name for name, _ in plain.declined] == ["ffi", "pallas"]
    # A name given explicitly: only it, nothing declined.
    (only,) = info.explain(
        dj.topk, sds((2, 64), jnp.float32), sds((2,), jnp.int32), 4, implementation="reference"
    )
    assert only.implementation == "reference" and only.declined == ()


def test_explain_a_decode_step():
    choices = info.decode_step(batch=2, context=20000)
    ops = [c.op for c in choices]
    # On CPU every layer runs op by op, saying why the fused layer declined.
    assert (choices[0].op, choices[0].implementation) == ("publish: layer", "op by op")
    assert choices[0].declined[0][0] == "fused" and no_cuda_here(choices[0].declined[0][1])
    assert ops[1:3] == ["paged_mqa_logits", "topk"]
    assert "select_candidate_blocks" in ops and "sort_candidate_blocks" in ops
    # Four consumers, each reporting its path: mask on CPU, with the reason the sparse one
    # declined (no sparse kernel here).
    paths = [c for c in choices if c.op == "select: consumer path"]
    assert len(paths) == 4
    if jax.default_backend() != "gpu":
        for c in paths:
            assert c.implementation == "mask"
            ((name, why),) = c.declined
            assert name == "sparse" and no_cuda_here(why), why
            assert f"sparse declined: {why}" in str(c)
    short = info.decode_step(batch=1, context=16384)  # every block is a candidate
    short_paths = [c for c in short if c.op == "select: consumer path"]
    assert [c.implementation for c in short_paths] == ["dense (every block is a candidate)"] * 4
    assert short_paths[0].declined == (
        ("sparse", "1 query row, fewer than 8: the dense top-k is faster there"),
    )
    if jax.default_backend() != "gpu":  # 8 rows, but no sparse kernel here: dense still
        eight = info.decode_step(batch=8, context=16384)
        for c in eight:
            if c.op == "select: consumer path":
                assert c.implementation == "dense (every block is a candidate)"
                ((name, why),) = c.declined
                assert name == "sparse" and no_cuda_here(why), why
    # A table not published by this step, over a page table of at most C·B positions: mask.
    cfg = dj.IndexerConfig()
    q = dj.QueryBundle(
        sds((1, 1, 32, 128), jnp.float8_e4m3fn), sds((1, 1, 32), jnp.float32), None, "fp8"
    )
    cache = dj.PagedIndexCache(sds((256, 64, 1, 132), jnp.uint8), "fp8")
    n = cfg.candidate_topk_blocks
    table = dj.CandidateTable(
        sds((1, n), jnp.int32),
        sds((1,), jnp.int32),
        sds((1,), jnp.int32),
        sds((1, n), jnp.int32),
        block_size=cfg.candidate_block_size,
    )
    (choice,) = [
        c
        for c in info.explain(
            lambda *a: dj.select(*a, cfg),
            q,
            cache,
            sds((1,), jnp.int32),
            sds((1, 256), jnp.int32),
            table,
        )
        if c.op == "select: consumer path"
    ]
    assert choice.implementation == "mask"
    assert "at most C·B = 16384 positions" in choice.declined[0][1]


def test_explain_reports_the_cuda_select_on_a_simulated_gpu(simulated_h200):
    choices = info.explain(
        lambda s, n: dj.topk(s, n, 512, implementation="ffi"),
        sds((8, 131072), jnp.float32),
        sds((8,), jnp.int32),
    )
    assert [(c.op, c.implementation) for c in choices] == [
        ("topk: CUDA select", "short"),
        ("topk", "ffi"),
    ]


def test_a_decode_step_runs_fused_layers_on_a_simulated_h200(simulated_h200):
    for batch, context, path in (
        (8, 131072, "sparse"),
        (1, 16384, "dense"),
        (8, 16384, "sparse"),  # every block a candidate, but 8 rows: the sparse row
    ):
        choices = info.decode_step(batch=batch, context=context)
        layers = [(c.op, c.implementation) for c in choices if c.op.endswith(": layer")]
        assert (
            layers
            == [("publish: layer", "fused (one custom call)")]
            + [("select: layer", "fused (one custom call)")] * 4
        ), (batch, context)
        paths = [c.implementation for c in choices if c.op == "select: consumer path"]
        assert all(p.startswith(path) for p in paths) and len(paths) == 4


def test_info_command_runs():
    done = subprocess.run(
        [sys.executable, "-m", "dsv41_jax", "info", "--batch", "1", "--context", "4096"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "backend:" in done.stdout and "topk:" in done.stdout


def test_info_options_have_help(capsys):
    with pytest.raises(SystemExit):
        info.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--batch BATCH requests in the decode step" in out
    assert "--context CONTEXT positions of context per request" in out


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--batch", "0"], "argument --batch: must be a positive int, got 0"),
        (["--batch", "-3"], "argument --batch: must be a positive int, got -3"),
        (["--context", "-5"], "argument --context: must be a positive int, got -5"),
        (["--context", "99999999999"], "context must be at most 2\\*\\*31 - 1"),
        (["--batch", "64", "--context", "40000000"], "batch x context must fit"),
        (["--batch", "two"], "argument --batch: not an int"),
    ],
)
def test_info_command_refuses_bad_sizes_with_a_usage_error(capsys, argv, match):
    """An argparse error (exit status 2, the usage line) naming the option, not a traceback."""
    with pytest.raises(SystemExit) as exit_info:
        info.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: python -m dsv41_jax info" in err
    assert __import__("re").search(match, err), err


def test_explain_keeps_numpy_ints_static_and_traces_keyword_arguments():
    import numpy as np

    scores, lens = sds((8, 4096), jnp.float32), sds((8,), jnp.int32)
    by_position = info.explain(dj.topk, scores, lens, 64)
    assert info.explain(dj.topk, scores, lens, np.int64(64)) == by_position  # was "traced k"
    assert info.explain(dj.topk, scores, lengths=lens, k=64) == by_position
    assert info.explain(dj.topk, scores=scores, lengths=lens, k=np.int32(64)) == by_position
    (only,) = info.explain(dj.topk, scores, lens, 4, implementation="reference")
    assert only.implementation == "reference"
    with pytest.raises(ValueError, match="fn must be callable"):
        info.explain("topk", scores)


def test_a_simulated_device_is_what_the_dispatch_reads_and_only_inside():
    """`simulated_device` swaps the facts the dispatch reads (backend, compute capability, the
    short select's occupancy) for its block only, nested blocks included; anything else than
    DeviceFacts is refused."""
    real = (_ext.backend(), _ext.compute_capability())
    with info.simulated_device(info.H200) as facts:
        assert facts is info.H200
        assert (_ext.backend(), _ext.compute_capability()) == ("gpu", "9.0")
        assert _ext.short_topk_max_clusters(1) == 132 and _ext.short_topk_max_clusters(9) == 0
        with info.simulated_device(SM80):
            assert _ext.compute_capability() == "8.0" and _ext.short_topk_max_clusters(2) == 2
        assert _ext.compute_capability() == "9.0"
    assert (_ext.backend(), _ext.compute_capability()) == real
    with pytest.raises(TypeError, match="DeviceFacts"):
        with info.simulated_device(("gpu", "9.0")):
            pass


def test_info_names_the_jax_and_warns_once_on_a_gpu_with_a_jax_not_gpu_verified(
    monkeypatch, caplog
):
    """`info.device()` names the installed jax and whether the GPU suite has passed on it. On
    another jax, reading a real GPU logs one WARNING a process; a CPU backend never does."""
    line = info.device()["jax"]
    assert isinstance(line, str) and line.startswith(jax.__version__ + " (")
    assert ("(GPU-verified)" in line) == status.jax_gpu_verified(jax.__version__)
    assert status.jax_gpu_verified("0.11.2") and not status.jax_gpu_verified("0.12.1")
    monkeypatch.setattr(jax, "__version__", "0.12.1")
    assert "not GPU-verified: the GPU tests have run on jax 0.11.2" in info.device()["jax"]
    _ext.warn_unverified_jax.cache_clear()
    try:
        for backend, warned in (("cpu", 0), ("gpu", 1), ("gpu", 1), ("cpu", 1)):
            monkeypatch.setattr(jax, "default_backend", lambda: backend)
            with caplog.at_level("WARNING", logger="dsv41_jax"):
                _ext._real_facts.__wrapped__()  # what the ops read first (cached in a process)
            said = [r for r in caplog.records if "jax 0.12.1: the dsv41_jax GPU" in r.getMessage()]
            assert len(said) == warned, backend  # the records of the whole test so far
    finally:
        _ext.warn_unverified_jax.cache_clear()


# ------------------------------------------------ issue 70: the records and calls that misled
def test_device_facts_check_their_fields_and_store_cluster_counts_as_a_tuple():
    """A list of cluster counts was kept as a list: the plan's cache then raised "unhashable
    type: 'list'". It is stored as a tuple; a field of another type is a ValueError naming it."""
    facts = info.DeviceFacts("gpu", "9.0", [132, 66], np.int64(132))
    assert facts.short_topk_clusters == (132, 66) and facts.sm_count == 132
    assert facts == info.DeviceFacts("gpu", "9.0", (132, 66), 132) and hash(facts)
    assert dj.plan("topk", sds((8, 4096), jnp.float32), 64, device=facts).device.sm_count == 132
    for args, message in [
        (("gpu", 9.0), "DeviceFacts.compute_capability must be a string"),
        (("", "9.0"), "DeviceFacts.backend must be a string"),
        (("gpu", "9.0", 132), "DeviceFacts.short_topk_clusters must be a sequence"),
        (("gpu", "9.0", (1.5,)), "DeviceFacts.short_topk_clusters must be a non-negative int"),
        (("gpu", "9.0", (), -1), "DeviceFacts.sm_count must be a non-negative int"),
    ]:
        with pytest.raises(ValueError, match=message):
            info.DeviceFacts(*args)


def test_explain_refuses_float64_arguments_the_call_refuses():
    """A float64 ShapeDtypeStruct was traced as float32 and explained as the reference's choice,
    while the call itself refuses float64 scores: it is refused, naming the argument."""
    lens = sds((8,), jnp.int32)
    for args, kwargs, name in [
        ((sds((8, 4096), jnp.float64), lens), dict(k=64), "args\\[0\\]"),
        ((), dict(scores=sds((8, 4096), jnp.float64), lengths=lens, k=64), "scores"),
    ]:
        with pytest.raises(ValueError, match=f"{name} holds float64 values"):
            info.explain(dj.topk, *args, **kwargs)
    with pytest.raises(ValueError, match="scores must be float32, bfloat16 or float16"):
        dj.topk(np.zeros((8, 4096)), np.full(8, 9, np.int32), 64)  # what the call does
    with jax.enable_x64(True):  # float64 is traced as float64: the op's own error
        with pytest.raises(ValueError, match="scores must be float32, bfloat16 or float16"):
            info.explain(dj.topk, sds((8, 4096), jnp.float64), lens, k=64)
    (choice,) = info.explain(dj.topk, sds((8, 4096), jnp.float32), np.full(8, 9), k=64)
    assert choice.op == "topk"  # int64 lengths are int32 in the call too: explained


def test_an_eager_op_under_a_simulated_gpu_is_refused_clearly():
    """Run eagerly (vmap included) inside `simulated_device(H200)` on a CPU, the Pallas kernel
    the plan picks failed deep in JAX ("Only interpret mode is supported on CPU backend"); it is
    a ValueError saying the simulated device only traces. Tracing and lowering still work."""
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU is here: the kernels run")
    s, n = jnp.zeros((8, 4096)), jnp.full((8,), 9)
    mask = jnp.zeros((8, 16), jnp.int32)  # a mask the Pallas select gathers: it runs first

    def masked(s, n, m):
        return dj.topk(s, n, 64, candidates=m)

    with info.simulated_device(info.H200):
        for call in (
            lambda: masked(s, n, mask),
            lambda: dj.block_amax(s, n),
            lambda: jax.vmap(masked)(s[None], n[None], mask[None]),
        ):
            with pytest.raises(ValueError, match=r"cannot run on this cpu machine: simulated_dev"):
                call()
        (choice,) = info.explain(masked, s, n, mask)
        text = jax.jit(masked).trace(s, n, mask).lower(lowering_platforms=("cuda",)).as_text()
    assert choice.implementation == "pallas" and "mosaic_gpu" in text
    assert masked(s, n, mask).shape == (8, 64)  # outside: the reference on this CPU
