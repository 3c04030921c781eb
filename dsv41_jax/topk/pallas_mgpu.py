"""`implementation="pallas"` of topk and select_candidate_blocks: the Mosaic GPU select of
`dsv41_jax.topk.mgpu_select` (SIMT programs in `plgpu.kernel`s of 1024 threads).

What it takes: float32 scores (bfloat16 where a row is a multiple of 8), any row length, k up
to 16,384 (4,096 for rows over 16,384 columns), candidate-block masks; not ragged rows
(`starts`). `emulate=True` runs the same program on the CPU emulator (tests only: numpy in and
out, slow, with bounds, initialisation and race checks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _ext, _mgpu
from dsv41_jax.topk import mgpu_select


def preferred(scores, k: int, starts, candidates, block_size: int) -> bool:
    """Whether the Pallas select measured faster than the CUDA selects for such a call (H200,
    BENCHMARKS.md): rows it holds in one CTA (up to 16,384 columns; 0.79-0.90x the CUDA
    select's time) and masked rows it gathers (0.45-0.62x); not longer unmasked rows."""
    n = scores.shape[1]
    takes = starts is None and k <= mgpu_select.MAX_K and _source(scores) is not None
    if candidates is not None:
        return takes and mgpu_select.gathers(n, candidates.shape[1], block_size)
    return takes and n <= mgpu_select.CHUNK


def _source(scores) -> str | None:
    if scores.dtype == jnp.float32:
        return "f32"
    if scores.dtype == jnp.bfloat16 and scores.shape[1] % 8 == 0:
        return "bf16"
    return None


def _run(op: str, source: str, data, lengths, k: int, members, block_size: int, emulate: bool):
    rows, n = data.shape
    if not emulate:
        _mgpu.require_gpu(op)
    if k > mgpu_select.MAX_K:
        raise NotImplementedError(f"{op} pallas: k <= {mgpu_select.MAX_K} (got {k})")
    if n > mgpu_select.CHUNK and k > mgpu_select.MAX_K_LONG:
        raise NotImplementedError(
            f"{op} pallas: k <= {mgpu_select.MAX_K_LONG} for rows over {mgpu_select.CHUNK} "
            f"columns (got k={k}, {n} columns)"
        )
    if rows * max(n, k) >= 2**31:
        raise NotImplementedError(f"{op} pallas: rows x columns must stay below 2^31")
    if rows == 0 or n == 0:
        return jnp.full((rows, k), -1, jnp.int32)
    lengths = _checks.int32(lengths)
    if members is not None:
        members = _checks.int32(members)
        if members.shape[1] == 0:
            members = None
    threads = mgpu_select.first_threads(rows, n, k, _ext.sm_count() if not emulate else 132)
    run: Callable[..., Any] = mgpu_select.launch
    if emulate:
        data, lengths, run = np.asarray(data), np.asarray(lengths), mgpu_select.emulate
        members = None if members is None else np.asarray(members)
    return mgpu_select.select(
        run, source, data, lengths, k, members=members, block_size=block_size, threads=threads
    )


def topk(scores, lengths, k, starts, candidates, block_size, *, emulate: bool = False):
    if starts is not None:
        raise NotImplementedError("topk pallas: rows with starts (prefill) not supported")
    source = _source(scores)
    if source is None:
        raise NotImplementedError(
            f"topk pallas: float32 scores, or bfloat16 rows of a multiple of 8 columns (got "
            f"{scores.dtype} rows of {scores.shape[1]})"
        )
    return _run("topk", source, scores, lengths, k, candidates, block_size, emulate)


def select_candidate_blocks(
    block_scores, lengths, num_candidates, block_size, *, emulate: bool = False
):
    _mgpu.require_float32(block_scores, "select_candidate_blocks")
    return _run(
        "select_candidate_blocks",
        "blocks",
        block_scores,
        lengths,
        num_candidates,
        None,
        block_size,
        emulate,
    )
