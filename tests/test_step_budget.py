"""The custom calls a decode step costs, counted on any machine: the step lowered for CUDA as
on an H200 (nothing runs). Each custom call is host work XLA repeats on every call of the
jitted step (a command to record or update, a thunk to run), so a change that adds one to the
step or to a layer fails here before it reaches a serving loop."""

from __future__ import annotations

import collections
import re

import jax
import jax.numpy as jnp
import pytest

import dsv41_jax as dj

LAYERS = (20, 24, 28, 32, 36)
# One custom call a layer and DeepGEMM's schedule once a step (the first fused layer computes it
# and the step's state hands it on).
BUDGET = {"dsv41_sm90_paged_mqa_schedule": 1, "dsv41_sm90_publish": 1}


def custom_calls(batch: int, context: int, stacked=False, **indexer) -> collections.Counter:
    cfg = dj.IndexerConfig()
    pages = context // cfg.page_size
    sds = jax.ShapeDtypeStruct
    cache = dj.PagedIndexCache(sds((batch * pages, 64, 1, 132), jnp.uint8))
    query = dj.QueryBundle(
        sds((batch, 1, 32, 128), jnp.float8_e4m3fn), sds((batch, 1, 32), jnp.float32)
    )
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=LAYERS[1:], **indexer)
    args = (
        dict.fromkeys(LAYERS, query),
        dict.fromkeys(LAYERS, cache),
        sds((batch,), jnp.int32),
        sds((batch, pages), jnp.int32),
    )
    traced = jax.jit(lambda *a: ix.decode_stacked(*a) if stacked else ix.decode(*a)).trace(*args)
    text = traced.lower(lowering_platforms=("cuda",)).as_text()
    return collections.Counter(re.findall(r"stablehlo\.custom_call @([\w$.]+)", text))


def test_the_stacked_step_has_one_output(simulated_h200):
    cfg = dj.IndexerConfig()
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=LAYERS[1:])
    out = jax.eval_shape(
        ix.decode_stacked,
        *[
            dict.fromkeys(LAYERS, x)
            for x in (
                dj.QueryBundle(
                    jax.ShapeDtypeStruct((8, 1, 32, 128), jnp.float8_e4m3fn),
                    jax.ShapeDtypeStruct((8, 1, 32), jnp.float32),
                ),
                dj.PagedIndexCache(jax.ShapeDtypeStruct((8 * 2048, 64, 1, 132), jnp.uint8)),
            )
        ],
        jax.ShapeDtypeStruct((8,), jnp.int32),
        jax.ShapeDtypeStruct((8, 2048), jnp.int32),
    )
    assert out.shape == (len(LAYERS), 8, cfg.index_topk) and out.dtype == jnp.int32


@pytest.mark.parametrize(
    "batch,context,consumer",
    [
        (1, 16384, "dsv41_sm90_dense_select"),
        (8, 16384, "dsv41_sm90_sparse_select"),  # the step's own table, read as is
        (8, 131072, "dsv41_sm90_sparse_select"),
    ],
)
def test_decode_step_custom_calls_within_budget(simulated_h200, batch, context, consumer):
    calls = custom_calls(batch, context)
    budget = collections.Counter(BUDGET) + collections.Counter({consumer: len(LAYERS) - 1})
    over = {name: n for name, n in calls.items() if n > budget.get(name, 0)}
    assert not over, f"custom calls over the step's budget {dict(budget)}: {dict(calls)}"
    assert calls["dsv41_sm90_publish"] == 1 and calls[consumer] == len(LAYERS) - 1
    assert sum(calls.values()) == len(LAYERS) + 1


def test_the_mask_path_is_one_call_a_consumer_too(simulated_h200):
    calls = custom_calls(8, 131072, path="mask")
    assert calls["dsv41_sm90_dense_select"] == 4 and sum(calls.values()) == len(LAYERS) + 1


def test_every_handler_is_command_buffer_compatible():
    """Every XLA FFI handler the extension defines declares the command-buffer trait, so no
    custom call of ours cuts the CUDA graph XLA captures of a model's jitted step."""
    from pathlib import Path

    ffi = Path(__file__).parents[1] / "ffi"
    sources = "".join(p.read_text() for p in sorted(ffi.glob("*.c[cu]")))
    handlers = re.findall(r"XLA_FFI_DEFINE_HANDLER_SYMBOL\(([^;]*)\);", sources)
    assert len(handlers) >= 10
    for h in handlers:
        assert "kCmdBuffer" in h, f"a handler without the command-buffer trait: {h.split(',')[0]}"
