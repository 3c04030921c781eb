"""Ragged prefill on the GPU: DeepGEMM's SM90 FP8 MQA logits through the FFI against the
reference, and the prefill selection on them (run on the device machine)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import calc_diff, packed_keys, poison_device_memory, query

import dsv41_jax as dj

pytestmark = pytest.mark.gpu


def ragged_ranges(rng, t):
    """Two causal requests packed, plus the edges: empty rows, a single key, a range ending at
    T, the whole buffer; T and the row count are not multiples of 4 or 256."""
    split = t // 3
    s = [0] * split + [split] * (t - split)
    e = list(range(1, split + 1)) + list(range(split + 1, t + 1))
    s += [0, 0, 7, t - 1, 0, t, 5]
    e += [0, 1, 7, t, t, t, 260]
    return np.array(s, np.int32), np.array(e, np.int32)


@pytest.mark.parametrize("heads", [32, 64])
@pytest.mark.parametrize("relative", [True, False])
def test_ffi_mqa_logits_match_reference(rng, heads, relative):
    t = 1001
    keys = packed_keys(rng, t)
    s, e = ragged_ranges(rng, t)
    q = query(rng, len(s), 1, heads, 128)
    poison_device_memory()  # an element the handler forgets to write would read the pattern
    args = (q, keys, jnp.asarray(s), jnp.asarray(e))
    got = np.asarray(dj.mqa_logits(*args, relative=relative, implementation="ffi"))
    want = np.asarray(dj.mqa_logits(*args, relative=relative, implementation="reference"))
    cols = np.arange(t)[None]
    inside = (cols < (e - s)[:, None]) if relative else (cols >= s[:, None]) & (cols < e[:, None])
    assert (got[~inside] == -np.inf).all(), "outside each range must be exactly -inf"
    assert np.isfinite(got[inside]).all()
    # DeepGEMM's criterion, as for the paged kernel (Hopper's FP8 accumulation is not fp32's).
    assert calc_diff(got[inside], want[inside]) < 5e-6
    scale = np.abs(want[inside]).max()
    np.testing.assert_allclose(got[inside], want[inside], rtol=0, atol=2e-3 * scale)


def test_ffi_mqa_logits_many_query_blocks_repeatable(rng):
    """One causal request of 4100 tokens: ~1000 query blocks over the persistent grid; bitwise
    equal run to run and under jit."""
    t = 4100
    keys = packed_keys(rng, t)
    q = query(rng, t, 1, 32, 128)
    s, e = jnp.zeros((t,), jnp.int32), jnp.arange(1, t + 1, dtype=jnp.int32)
    f = jax.jit(lambda *a: dj.mqa_logits(*a, relative=True, implementation="ffi"))
    first = np.asarray(f(q, keys, s, e))
    np.testing.assert_array_equal(np.asarray(f(q, keys, s, e)), first)
    rows = np.r_[0:8, 2040:2050, t - 8 : t]  # the reference on a sample of rows
    sub = dj.QueryBundle(q.values[rows], q.weights[rows])
    want = np.asarray(
        dj.mqa_logits(sub, keys, s[rows], e[rows], relative=True, implementation="reference")
    )
    inside = np.arange(t)[None] < np.asarray(e)[rows][:, None]
    assert (first[rows][~inside] == -np.inf).all()
    assert calc_diff(first[rows][inside], want[inside]) < 5e-6


def test_ffi_mqa_logits_clamps_traced_ranges(rng):
    """Ranges outside [0, T] (or ends < starts) under jit: the handler clamps them; nothing is
    written outside the output and the result equals the clamped call."""
    t = 300
    keys = packed_keys(rng, t)
    q = query(rng, 6, 1, 32, 128)
    s = np.array([-50, 0, 290, 400, 10, 5], np.int32)
    e = np.array([20, 900, 310, 500, 4, 5], np.int32)
    f = jax.jit(lambda a, b: dj.mqa_logits(q, keys, a, b, relative=True, implementation="ffi"))
    got = np.asarray(f(jnp.asarray(s), jnp.asarray(e)))
    cs = np.clip(s, 0, t)
    ce = np.maximum(np.clip(e, 0, t), cs)
    np.testing.assert_array_equal(got, np.asarray(f(jnp.asarray(cs), jnp.asarray(ce))))


def test_prefill_selection_on_ffi_logits_is_exact(rng):
    """publish_prefill / select_prefill (kernels by default) equal the reference selection run
    on the same FFI logits, exactly."""
    cfg = dj.IndexerConfig(index_topk=64, candidate_topk_blocks=32)
    t = 1500
    keys = packed_keys(rng, t)
    s, e = ragged_ranges(rng, t)
    starts, ends = jnp.asarray(s), jnp.asarray(e)
    q0, q1 = query(rng, len(s), 1, 32, 128), query(rng, len(s), 1, 32, 128)
    top, table = jax.jit(lambda *a: dj.publish_prefill(*a, cfg))(q0, keys, starts, ends)
    sel = jax.jit(lambda *a: dj.select_prefill(*a, cfg))(q1, keys, starts, ends, table)

    lens = ends - starts
    ref = ("reference",)
    l0 = dj.mqa_logits(q0, keys, starts, ends, relative=True, implementation="ffi")
    want_top = dj.topk(l0, lens, 64, implementation="reference")
    amax = dj.block_amax(l0, lens, block_size=8, implementation="reference")
    chosen = dj.select_candidate_blocks(
        amax, lens, num_candidates=32, block_size=8, implementation=ref
    )
    np.testing.assert_array_equal(np.asarray(top), np.asarray(want_top))
    got_blocks = np.asarray(table.blocks)
    want_blocks = np.sort(np.where(np.asarray(chosen) < 0, np.iinfo(np.int32).max, chosen), 1)
    np.testing.assert_array_equal(got_blocks, want_blocks)
    l1 = dj.mqa_logits(q1, keys, starts, ends, relative=True, implementation="ffi")
    want_sel = dj.topk(l1, lens, 64, candidates=table, block_size=8, implementation="reference")
    np.testing.assert_array_equal(np.asarray(sel), np.asarray(want_sel))
