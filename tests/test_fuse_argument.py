"""Whether the layers run fused is an argument jit keys on: `TwoLevelIndexer.fuse` (a static
field of the step) and `fuse=` of `publish` / `select` / `select_plain`. One jitted function
called with the other value traces again and lowers to its custom calls (lowered for CUDA as on
an H200, on any machine: nothing runs), and `dsv41_jax.info.explain` says why a layer does not
run as one call."""

from __future__ import annotations

import collections
import re

import jax
import jax.numpy as jnp
import pytest

import dsv41_jax as dj
from dsv41_jax import _ext, fused, info

sds = jax.ShapeDtypeStruct
CFG = dj.IndexerConfig()
BATCH, PAGES = 2, 2048  # 128K positions: the consumers read their candidates (sparse rows)
LAYERS = (20, 24)
FUSED_LAYERS = {fused.PUBLISH, fused.DENSE_SELECT, fused.SPARSE_SELECT}


def _layer_inputs():
    row = CFG.head_dim + 4  # fp8 values and a float32 scale
    cache = dj.PagedIndexCache(sds((BATCH * PAGES, CFG.page_size, 1, row), jnp.uint8), "fp8")
    shape = (BATCH, CFG.next_n, CFG.num_heads)
    query = dj.QueryBundle(
        sds((*shape, CFG.head_dim), jnp.float8_e4m3fn), sds(shape, jnp.float32), None, "fp8"
    )
    return query, cache, sds((BATCH,), jnp.int32), sds((BATCH, PAGES), jnp.int32)


def _step_inputs():
    query, cache, lens, bt = _layer_inputs()
    return dict.fromkeys(LAYERS, query), dict.fromkeys(LAYERS, cache), lens, bt


def _calls(traced) -> tuple[collections.Counter, str]:
    text = traced.lower(lowering_platforms=("cuda",)).as_text()
    return collections.Counter(re.findall(r"stablehlo\.custom_call @([\w$.]+)", text)), text


def _indexer(fuse=True):
    return dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=(24,), fuse=fuse)


def test_fuse_is_checked_and_defaults_to_true():
    assert _indexer(True) == dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=(24,))
    for bad in ("no", None, 1):
        with pytest.raises(ValueError, match="fuse must be a bool"):
            _indexer(bad)
    with pytest.raises(ValueError, match="fuse must be a bool"):
        jax.eval_shape(lambda *a: dj.publish(*a, CFG, fuse="no"), *_layer_inputs())


def test_one_jitted_step_traces_again_with_fuse(simulated_h200):
    """The same jitted function, the step's `fuse` changed between calls (and back): each
    lowers to its own custom calls, none to a trace made with the other value."""
    step = jax.jit(lambda ix, *a: ix.decode(*a).selections)
    args = _step_inputs()
    for fuse in (True, False, True):
        calls, _ = _calls(step.trace(_indexer(fuse), *args))
        if fuse:  # one call a layer, the schedule once
            assert calls == {
                fused.SCHEDULE: 1,
                fused.PUBLISH: 1,
                fused.SPARSE_SELECT: 1,
            }, calls
        else:  # op by op: the logits and the select are custom calls of their own
            assert not FUSED_LAYERS & set(calls), calls
            assert "dsv41_sm90_paged_mqa_logits" in calls


@pytest.mark.parametrize("layer", ["publish", "select", "select_plain"])
def test_one_jitted_layer_traces_again_with_fuse(simulated_h200, layer):
    """`fuse=` as a static argument: the fused layer's one call, then its ops, then the one
    call again, from the same jitted function."""
    query, cache, lens, bt = _layer_inputs()
    c, b = CFG.candidate_topk_blocks, CFG.candidate_block_size
    table = dj.CandidateTable(
        sds((query.num_rows, c), jnp.int32),
        sds((query.num_rows,), jnp.int32),
        sds((query.num_rows,), jnp.int32),
        sds((query.num_rows, c), jnp.int32),
        block_size=b,
    )
    fns = {
        "publish": lambda *a, fuse: dj.publish(*a[:4], CFG, fuse=fuse),
        "select": lambda *a, fuse: dj.select(*a, CFG, fuse=fuse),
        "select_plain": lambda *a, fuse: dj.select_plain(*a[:4], CFG, fuse=fuse),
    }
    want = {"publish": fused.PUBLISH, "select": fused.SPARSE_SELECT}.get(layer, fused.DENSE_SELECT)
    f = jax.jit(fns[layer], static_argnames="fuse")
    for fuse in (True, False, True):
        calls, _ = _calls(f.trace(query, cache, lens, bt, table, fuse=fuse))
        if fuse:
            assert calls[want] == 1, calls
        else:
            assert not FUSED_LAYERS & set(calls), calls


def test_explain_says_why_a_layer_runs_op_by_op(simulated_h200):
    layers = info.explain(lambda *a: _indexer().decode(*a), *_step_inputs())
    assert not [c for c in layers if c.op == "decode: step"]
    assert {c.implementation for c in layers if c.op.endswith(": layer")} == {
        "fused (one custom call)"
    }
    ops = info.explain(lambda *a: _indexer(False).decode(*a), *_step_inputs())
    layer_choices = [c for c in ops if c.op.endswith(": layer")]
    assert layer_choices and all(
        c.declined == (("fused", "fuse=False, as asked"),) for c in layer_choices
    )
    (publish,) = [
        c
        for c in info.explain(dj.publish, *_layer_inputs(), CFG, fuse=False)
        if c.op == "publish: layer"
    ]
    assert (publish.implementation, publish.declined) == (
        "op by op",
        (("fused", "fuse=False, as asked"),),
    )


@pytest.mark.parametrize("pages", [PAGES, PAGES + 2])
def test_fused_top_k_carries_the_split_rows_workspace(simulated_h200, pages):
    """The fused publish and plain layer, alone and in the step, hand their top-k a split-rows
    workspace (`LIMITS["filter_split_row_words"]` words a row) exactly where the plan splits the
    rows (few rows past the short select's 131072: here 2 rows of 131200), else one word."""
    query, cache, lens, bt = _layer_inputs()
    cache = dj.PagedIndexCache(sds((BATCH * pages, *cache.data.shape[1:]), jnp.uint8), "fp8")
    bt = sds((BATCH, pages), jnp.int32)
    words = BATCH * CFG.next_n * _ext.limit("filter_split_row_words") if pages > PAGES else 1
    layers = {
        "publish": lambda *a: dj.publish(*a, CFG),
        "plain": lambda *a: dj.select_plain(*a, CFG),
    }
    for name, f in layers.items():
        calls, text = _calls(jax.jit(f).trace(query, cache, lens, bt))
        assert calls.keys() & FUSED_LAYERS and f"tensor<{words}xui32>" in text, (name, calls)
    step = jax.jit(lambda ix, *a: ix.decode(*a).selections)
    args = dict.fromkeys(LAYERS, query), dict.fromkeys(LAYERS, cache), lens, bt
    calls, text = _calls(step.trace(_indexer(), *args))
    assert calls[fused.PUBLISH] == 1 and f"tensor<{words}xui32>" in text, calls
