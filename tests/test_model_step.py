"""The indexer where a model calls it (examples/model_step.py): a decode step in one jit, the
indexer one layer at a time between the model's own work. Its selections equal the reference
on the same queries and caches (and, on the GPU, the same layers called eagerly), at next_n 1
and 2; lowered for an H200, the step holds one custom call a layer and one schedule."""

from __future__ import annotations

import collections
import importlib.util
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dsv41_jax as dj

PATH = Path(__file__).parents[1] / "examples" / "model_step.py"


@pytest.fixture(scope="module")
def ms():
    spec = importlib.util.spec_from_file_location("model_step_example", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_steps(ms, ix, rng, batch, context, steps, shape):
    """`steps` jitted model steps; the last one's (state, {layer: (query, selection)})."""
    state, kv, bt = ms.init_state(rng, ix.config, shape, batch, context, steps)
    params = ms.init_params(jax.random.key(2), shape, ix.config)
    step = jax.jit(
        ms.decode_step, static_argnames=("fixed_selection", "inspect"), donate_argnames=("state",)
    )
    seen = None
    for i in range(steps):
        state, seen = step(ix, params, state, kv, bt, inspect=i == steps - 1)
    return state, seen, bt


def indexer(cfg, **kw):
    return dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=(24, 28, 32, 36), **kw)


@pytest.mark.parametrize("next_n", [1, 2])
def test_model_step_selects_as_the_reference(ms, rng, next_n):
    cfg = dj.IndexerConfig(next_n=next_n, index_topk=64, candidate_topk_blocks=32)
    shape = ms.ModelShape(hidden=256, block_mb=0.1, kv_dim=32)
    # Page tables of 704 positions: 88 blocks of 8 > C = 32, so the consumers select inside a
    # real table; three steps fill them to 700 positions.
    state, seen, bt = run_steps(ms, indexer(cfg), rng, 3, 700, 3, shape)
    assert sorted(seen) == [20, 24, 28, 32, 36]
    np.testing.assert_array_equal(np.asarray(state.context_lens), 700)
    queries = {layer: q for layer, (q, _) in seen.items()}
    want = indexer(cfg).decode(queries, state.caches, state.context_lens, bt).selections
    for layer, (_, got) in seen.items():
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want[layer]), f"layer {layer}")
        assert got.shape == (3 * next_n, 64)
    # The newest key of every row was written before its layer selected: row j of a request
    # sees L - next_n + 1 + j positions, the last of them this step's own key.
    lens = (
        np.repeat(np.asarray(state.context_lens), next_n)
        - next_n
        + 1
        + np.tile(np.arange(next_n), 3)
    )
    src = np.asarray(seen[20][1])
    assert all((src[r] < lens[r]).all() for r in range(len(lens)))
    ms.check_last_step(indexer(cfg), seen, state, bt)


def test_model_step_fixed_selection_runs_without_the_indexer(ms, rng):
    cfg = dj.IndexerConfig(index_topk=16, candidate_topk_blocks=8)
    shape = ms.ModelShape(hidden=128, block_mb=0.05, kv_dim=16)
    state, kv, bt = ms.init_state(rng, cfg, shape, 2, 300, 1)
    params = ms.init_params(jax.random.key(3), shape, cfg)
    jaxpr = jax.make_jaxpr(
        lambda p, s: ms.decode_step(indexer(cfg), p, s, kv, bt, fixed_selection=True)
    )(params, state)
    text = str(jaxpr)
    assert not re.search(r"\b(top_k|sort)\[", text)  # no selection ops at all
    out, _ = ms.decode_step(indexer(cfg), params, state, kv, bt, fixed_selection=True)
    assert out.hidden.shape == state.hidden.shape


def lowered_custom_calls(ms, batch, context, **kw) -> collections.Counter:
    cfg = dj.IndexerConfig()
    sds = jax.ShapeDtypeStruct
    shape = ms.ModelShape(hidden=1024, block_mb=0.5, kv_dim=64)
    pages = context // cfg.page_size
    state = ms.ModelState(
        sds((batch, 1, shape.hidden), jnp.bfloat16),
        dict.fromkeys(
            (20, 24, 28, 32, 36), dj.PagedIndexCache(sds((batch * pages, 64, 1, 132), jnp.uint8))
        ),
        sds((batch,), jnp.int32),
    )
    params = jax.eval_shape(lambda: ms.init_params(jax.random.key(0), shape, cfg))
    kv = sds((batch * pages * 64, shape.kv_dim), jnp.bfloat16)
    bt = sds((batch, pages), jnp.int32)
    ix = indexer(cfg, **kw)
    traced = jax.jit(lambda p, s, kv, bt: ms.decode_step(ix, p, s, kv, bt)).trace(
        params, state, kv, bt
    )
    text = traced.lower(lowering_platforms=("cuda",)).as_text()
    return collections.Counter(re.findall(r"stablehlo\.custom_call @([\w$.]+)", text))


@pytest.mark.parametrize(
    "batch,context,consumer",
    [
        (1, 16384, "dsv41_sm90_dense_select"),  # every block is a candidate: the dense top-k
        (8, 16384, "dsv41_sm90_sparse_select"),
        (8, 131072, "dsv41_sm90_sparse_select"),
    ],
)
def test_the_model_step_is_one_custom_call_a_layer(ms, simulated_h200, batch, context, consumer):
    """The indexer adds one custom call a layer to the model's jit and DeepGEMM's schedule once
    a step (the state carries it); the table is read as published (no rebuilding sort)."""
    calls = lowered_custom_calls(ms, batch, context)
    indexer_calls = {k: n for k, n in calls.items() if "physical" not in k}
    assert indexer_calls == {
        "dsv41_sm90_paged_mqa_schedule": 1,
        "dsv41_sm90_publish": 1,
        consumer: 4,
    }, dict(calls)


@pytest.mark.gpu
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("batch,context", [(1, 16384), (8, 131072)])
def test_model_step_on_gpu_equals_eager_layers_and_reference(ms, rng, next_n, batch, context):
    """On the GPU: the jitted model step's selections equal the same layers called eagerly
    (`decode_layer` one by one, outside any jit) and the reference selection over the same
    (FFI) logits, bitwise: the source's top-k and table, each consumer's top-k inside it."""
    from dsv41_jax.indexer import _publish_from_logits

    cfg = dj.IndexerConfig(next_n=next_n)
    shape = ms.ModelShape(hidden=2048, block_mb=2.0, kv_dim=128)
    ix = indexer(cfg)
    state, seen, bt = run_steps(ms, ix, rng, batch, context, 3, shape)
    lens = state.context_lens
    rows = dj.row_lengths(lens, next_n, bt.shape[1] * cfg.page_size)
    row_bt = dj.row_block_table(bt, next_n)
    st = ix.begin_decode(lens, bt)
    table = None
    for layer in (20, 24, 28, 32, 36):
        query, got = seen[layer][0], np.asarray(seen[layer][1])
        eager, st = ix.decode_layer(layer, query, state.caches[layer], st)
        np.testing.assert_array_equal(got, np.asarray(eager), f"layer {layer} vs eager")
        logits = dj.paged_mqa_logits(query, state.caches[layer], lens, bt, implementation="ffi")
        if layer == 20:
            want, table = _publish_from_logits(logits, rows, row_bt, cfg, ("reference",))
            for name in ("blocks", "count", "valid_lens", "physical"):
                np.testing.assert_array_equal(
                    np.asarray(getattr(st.table, name)), np.asarray(getattr(table, name)), name
                )
        else:
            want = dj.topk(
                logits,
                rows,
                cfg.index_topk,
                candidates=table,
                block_size=cfg.candidate_block_size,
                implementation="reference",
            )
        np.testing.assert_array_equal(got, np.asarray(want), f"layer {layer} vs reference")
