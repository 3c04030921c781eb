"""The plans of the ops without a select of their own (the logits ops, block scores, the
candidate table, the page transform): made before anything is traced from each
implementation's `supports` and the device record, they name the implementation that runs, the
kernel family it takes (SM90 or SM100) and why the ones before it declined; the op runs exactly
that (`dsv41_jax.info.explain` shows it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from devices import SM80, SM100
from factories import packed_keys, paged_cache, query

import dsv41_jax as dj
from dsv41_jax import _dispatch, info
from dsv41_jax.blocks.api import BLOCK_AMAX, SORT_CANDIDATE_BLOCKS
from dsv41_jax.logits.api import MQA_LOGITS, PAGED_MQA_LOGITS
from dsv41_jax.plan import OpPlan, device_record


def paged_inputs(fmt="fp8", heads=32, next_n=1):
    rng = np.random.default_rng(3)
    cache, bt = paged_cache(rng, 2, 4, 64, 128, fmt)
    q = query(rng, 2, next_n, heads, 128, fmt)
    return q, cache, jnp.array([70, 256], jnp.int32), bt


def only(choices, op):
    [c] = [c for c in choices if c.op == op]
    return c


@pytest.mark.parametrize(
    "facts, fmt, heads, runs, kernel, declined",
    [
        (info.H200, "fp8", 32, "ffi", "sm90", None),
        (info.H200, "fp8", 48, "reference", None, "needs 32 or 64 heads"),
        (info.H200, "mxfp4", 32, "reference", None, "needs the fp8 cache"),
        (SM100, "mxfp4", 32, "ffi", "sm100", None),
        (SM100, "fp8", 32, "reference", None, "needs the mxfp4 cache"),
        (SM80, "fp8", 32, "reference", None, "no kernel image for compute capability 8.0"),
    ],
)
def test_paged_logits_plan_names_the_kernel_family(
    simulate, facts, fmt, heads, runs, kernel, declined
):
    simulate(facts)
    q, cache, lens, bt = paged_inputs(fmt, heads)
    c = only(info.explain(dj.paged_mqa_logits, q, cache, lens, bt), "paged_mqa_logits")
    assert (c.implementation, c.plan.runs, c.plan.kernel) == (runs, runs, kernel)
    if declined is None:
        assert c.declined == ()
    else:
        [(name, why)] = c.declined
        assert name == "ffi" and declined in why
    assert isinstance(c.plan, OpPlan) and c.plan.device == device_record()
    again = PAGED_MQA_LOGITS.plan(None, q, cache, lens, bt, 256)
    assert again == c.plan and hash(again) == hash(c.plan)  # a value: equal plans, equal hashes


@pytest.mark.parametrize("sm100", [False, True])
def test_the_planned_kernel_is_the_one_lowered(simulate, sm100):
    simulate(SM100 if sm100 else info.H200)
    fmt = "mxfp4" if sm100 else "fp8"
    q, cache, lens, bt = paged_inputs(fmt)
    p = PAGED_MQA_LOGITS.plan(None, q, cache, lens, bt, 256)
    assert p.kernel == ("sm100" if sm100 else "sm90")
    text = (
        jax.jit(lambda *a: dj.paged_mqa_logits(*a, num_columns=256))
        .trace(q, cache, lens, bt)
        .lower(lowering_platforms=("cuda",))
        .as_text()
    )
    target = "dsv41_sm100_paged_mqa_logits" if sm100 else "dsv41_sm90_paged_mqa_logits"
    assert text.count("custom_call @dsv41_") == 1 and f"custom_call @{target}" in text
    keys = packed_keys(np.random.default_rng(4), 100, 128, fmt)
    rows = q.num_rows
    s, e = jnp.zeros(rows, jnp.int32), jnp.full(rows, 100, jnp.int32)
    assert MQA_LOGITS.plan(None, q, keys, s, e, True).kernel == p.kernel


def test_a_plan_for_another_device_is_refused_not_rerouted(simulate):
    """The op runs the plan's implementation or fails naming the device the plan was made for;
    it never falls back to another one silently."""
    simulate(info.H200)
    q, cache, lens, bt = paged_inputs()
    p = PAGED_MQA_LOGITS.plan(None, q, cache, lens, bt, 256)
    assert p.runs == "ffi"
    with info.simulated_device(SM80):
        with pytest.raises(dj.ExtensionUnavailable, match="the plan was made for gpu 9.0"):
            jax.eval_shape(lambda: PAGED_MQA_LOGITS.run_planned(p, q, cache, lens, bt, 256))


def test_plans_of_the_block_ops_on_an_h200(simulated_h200):
    h200 = device_record()
    scores = jax.ShapeDtypeStruct((4, 1000), jnp.float32)
    lens = jax.ShapeDtypeStruct((4,), jnp.int32)
    assert BLOCK_AMAX.plan(None, scores, lens, 8, None, True).runs == "pallas"
    bf16 = jax.ShapeDtypeStruct((4, 1000), jnp.bfloat16)
    p = BLOCK_AMAX.plan(None, bf16, lens, 8, None, True)
    assert p.runs == "reference" and "float32 scores only" in p.declined[0][1]
    p = BLOCK_AMAX.plan(None, scores, lens, 8, lens, True)  # ragged rows: shifted, then Pallas
    assert p.runs == "pallas" and p.declined == ()
    max_c = h200.limit("sort_max_candidates")
    bt = jax.ShapeDtypeStruct((4, 2), jnp.int32)
    for c, runs in ((max_c, "ffi"), (max_c + 1, "reference"), (0, "reference")):
        selected = jax.ShapeDtypeStruct((4, c), jnp.int32)
        p = SORT_CANDIDATE_BLOCKS.plan(None, selected, lens, bt, 8, 64)
        assert p.runs == runs, (c, p)
    text = str(SORT_CANDIDATE_BLOCKS.plan(None, selected, lens, bt, 8, 64))
    assert "ffi declines: dsv41_sort_candidate_blocks: empty inputs" in text


def test_on_the_cpu_every_op_runs_the_reference_and_says_why():
    if jax.default_backend() == "gpu":
        pytest.skip("the CPU's plans")
    q, cache, lens, bt = paged_inputs()
    c = only(info.explain(dj.paged_mqa_logits, q, cache, lens, bt), "paged_mqa_logits")
    assert c.implementation == "reference" and c.plan.kernel is None
    assert c.declined[0][0] == "ffi"
    scores = jax.ShapeDtypeStruct((4, 64), jnp.float32)
    c = only(info.explain(dj.block_amax, scores, jnp.full(4, 64)), "block_amax")
    assert c.implementation == "reference"
    assert c.declined == (
        ("pallas", "block_amax pallas: the Mosaic GPU kernel needs a CUDA GPU backend"),
    )


def test_the_kernel_familys_status_is_in_the_plan_and_an_unverified_one_warns(
    simulate, caplog, monkeypatch
):
    """The plan reads where the kernel family it picks has been verified (`dsv41_jax.status`);
    running one never verified in this project logs a WARNING once."""
    import logging

    simulate(info.H200)
    q, cache, lens, bt = paged_inputs()
    p = PAGED_MQA_LOGITS.plan(None, q, cache, lens, bt, 256)
    assert p.kernel_status == "verified on H200"
    assert "kernel: sm90 (compute capability 9.0; verified on H200)" in str(p)
    simulate(SM100)
    q, cache, lens, bt = paged_inputs("mxfp4")
    p = PAGED_MQA_LOGITS.plan(None, q, cache, lens, bt, 256)
    assert p.kernel_status == "compile-verified only"
    monkeypatch.setattr(_dispatch, "_logged", set())  # what this process has logged so far
    with caplog.at_level(logging.WARNING, logger="dsv41_jax"):
        for _ in range(2):
            jax.eval_shape(lambda: dj.paged_mqa_logits(q, cache, lens, bt, num_columns=256))
    warned = [r for r in caplog.records if "running the sm100 kernel" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"


def test_a_kernel_family_the_device_lacks_is_refused(simulate):
    """The logits wrappers run the plan's kernel family only on a device of that family."""
    from dsv41_jax.logits import ffi as logits_ffi

    simulate(SM100)
    q, cache, lens, bt = paged_inputs("mxfp4")
    with pytest.raises(NotImplementedError, match="no sm90 kernel on this device"):
        logits_ffi.paged_mqa_logits(q, cache, lens, bt, 256, kernel="sm90")
    out = jax.eval_shape(
        lambda: logits_ffi.paged_mqa_logits(q, cache, lens, bt, 256, kernel="sm100")
    )
    assert out.shape == (q.num_rows, 256)
