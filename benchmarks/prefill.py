"""Ragged prefill: the logits, the top-k over them and the whole `publish_prefill`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from benchmarks import inputs
from benchmarks.logits import SIMILAR
from benchmarks.table import Row
from benchmarks.timing import Timer

FP8_DENSE_TFLOPS = 989.0  # H100/H200 SXM dense FP8 tensor-core peak (the prefill logits floor)
PREFILL_TOKENS = (4096, 32768, 131072)
PREFILL_CHUNK = 32768  # query rows per call: [rows, T] fp32 logits, 16 GiB at T = 128K


def bench_prefill(timer: Timer, rng, bw, quick: bool) -> list[Row]:
    """Ragged prefill of one causal request of T tokens (row i sees keys [0, i + 1)), 32 heads,
    in chunks of at most 32K query rows (chunked prefill; the sum over chunks is reported): the
    logits (floor: the causal FLOPs at the FP8 peak), the top-k over them (floor: the visible
    logits read once) and the whole publish_prefill. The reference logits only at 4K.

    Every row is checked before it is timed: at 4K the logits against the reference's
    (similarity) and both selects against the reference top-k (exact); past it the forced filter
    select against the default one (two exact selects agree bitwise); publish_prefill's top-k
    against the default select over the same logits (the kernel is deterministic)."""
    import dsv41_jax as dj
    from dsv41_jax.topk import ffi as topk_ffi

    cfg = dj.IndexerConfig()
    rows = []
    for t in PREFILL_TOKENS[:1] if quick else PREFILL_TOKENS:
        keys = dj.quantize_keys(inputs.normal(rng, (t, 128)))
        shape = f"{t // 1024}K tokens, H 32" + (
            f", {PREFILL_CHUNK // 1024}K-row chunks" if t > PREFILL_CHUNK else ""
        )
        total = {"logits": 0.0, "topk": 0.0, "filter": 0.0, "publish": 0.0, "reference": 0.0}
        f = jax.jit(lambda q, k, s, e: dj.mqa_logits(q, k, s, e, relative=True))
        ref_logits = jax.jit(
            lambda *a: dj.mqa_logits(*a, relative=True, implementation="reference")
        )
        for r0 in range(0, t, PREFILL_CHUNK):
            n = min(PREFILL_CHUNK, t - r0)
            q = inputs.query(rng, n, 1, 32, 128)
            starts = jnp.zeros((n,), jnp.int32)
            ends = jnp.arange(r0 + 1, r0 + n + 1, dtype=jnp.int32)
            args = (q, keys, starts, ends)
            small = t <= 4096  # the references run here
            total["logits"] += timer.jax_us(
                f,
                [args],
                calls=1,
                want=ref_logits(*args) if small else None,
                what=f"mqa_logits {shape}",
                similar=SIMILAR,
            )
            if small and not quick:
                total["reference"] += timer.jax_us(ref_logits, [args], calls=1)
            logits = f(*args)
            want_top = None
            if small:
                want_top = dj.topk(logits, ends, cfg.index_topk, implementation="reference")
            top = timer.jax_us(
                lambda x, m: dj.topk(x, m, cfg.index_topk),
                [(logits, ends)],
                calls=1,
                want=want_top,
                what=f"topk {shape}",
            )
            total["topk"] += top
            default_top = jax.jit(lambda x, m: dj.topk(x, m, cfg.index_topk))(logits, ends)
            # The filter-first select forced (the dispatch takes the short-row select for rows
            # of at most 128K keys).
            total["filter"] += timer.jax_us(
                lambda x, m: topk_ffi.cuda_topk(
                    x,
                    m,
                    cfg.index_topk,
                    starts=None,
                    members=None,
                    block_size=8,
                    mode="positions",
                    algorithm="filter",
                ),
                [(logits, ends)],
                calls=1,
                want=default_top,
                what=f"topk {shape} filter",
            )
            del logits
            total["publish"] += timer.jax_us(
                lambda *a: dj.publish_prefill(*a, cfg),
                [args],
                calls=1,
                want=default_top,
                what=f"publish_prefill {shape}",
                pick=lambda result: result[0],
            )
            del default_top
        floor = 2.0 * 32 * 128 * t * (t + 1) / 2 / (FP8_DENSE_TFLOPS * 1e6)
        top_floor = 4.0 * t * (t + 1) / 2 / (bw * 1e3)
        rows.append(
            Row("mqa_logits (prefill)", shape, "ffi (DeepGEMM sm90)", total["logits"], floor)
        )
        if total["reference"]:
            rows.append(
                Row("mqa_logits (prefill)", shape, "reference (XLA)", total["reference"], floor)
            )
        rows.append(Row("topk k=512 (prefill rows)", shape, "default", total["topk"], top_floor))
        rows.append(
            Row("topk k=512 (prefill rows)", shape, "ffi filter", total["filter"], top_floor)
        )
        rows.append(Row("publish_prefill", shape, "default", total["publish"], floor + top_floor))
    return rows
