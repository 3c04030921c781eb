"""`implementation="pallas"` of topk and select_candidate_blocks: the Mosaic GPU select of
`dsv41_jax.topk.mgpu_select` (SIMT programs in `plgpu.kernel`s of 1024 threads).

What it takes: float32 scores (bfloat16 where a row is a multiple of 8), any row length, k up
to 16,384 (4,096 for rows over 16,384 columns), candidate-block masks, ragged rows (`starts`:
the program reads each row shifted to its start, a copy `rows.shift_rows` makes first, the
reference's own shift). `emulate=True` runs the same program on the CPU emulator (tests only:
numpy in and out, slow, with bounds, initialisation and race checks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _ext, _mgpu
from dsv41_jax.rows import shift_rows
from dsv41_jax.topk import mgpu_select


def declines(
    op: str,
    scores,
    k: int,
    masked: bool,
    block_size: int,
    source: str | None,
) -> str | None:
    """Why the Pallas select does not take such a call (None: it does). `source`: the program's
    score source ("f32", "bf16", "blocks": `source`), None for scores it has no source for.
    Whether it runs first is the plan's decision (`dsv41_jax.plan`)."""
    rows, n = scores.shape
    if source is None:
        return (
            f"{op} pallas: no program for {scores.dtype} rows of {n} (float32; bfloat16 top-k "
            f"rows of a multiple of 8)"
        )
    if source == "bf16" and masked and block_size % 8:
        return f"{op} pallas: bfloat16 scores with a mask need blocks of a multiple of 8"
    if k > mgpu_select.MAX_K:
        return f"{op} pallas: k <= {mgpu_select.MAX_K} (got {k})"
    if n > mgpu_select.CHUNK and k > mgpu_select.MAX_K_LONG:
        return (
            f"{op} pallas: k <= {mgpu_select.MAX_K_LONG} for rows over {mgpu_select.CHUNK} "
            f"columns (got k={k}, {n} columns)"
        )
    if rows * max(n, k) >= 2**31:
        return f"{op} pallas: rows x columns must stay below 2^31"
    return None


def supports(spec, device) -> str | None:
    """Why the Pallas select cannot run a call of `spec` (a `dsv41_jax.plan.Spec`) on `device`
    (a `dsv41_jax.plan.Device`), or None: what the plan reads (`declines`, on a GPU backend)."""
    op = spec.op
    if device.backend != "gpu":
        return f"{op} pallas: the Mosaic GPU kernel needs a CUDA GPU backend"
    scores = spec.scores()
    masked = spec.mask_blocks is not None
    src = source(scores, blocks=op == "select_candidate_blocks")
    return declines(op, scores, spec.k, masked, spec.block_size, src)


def source(scores, *, blocks: bool = False) -> str | None:
    """The program's score source for such scores (None: none): top-k over float32 ("f32") or
    bfloat16 rows of a multiple of 8 ("bf16"); with `blocks`, candidate selection over float32
    block scores ("blocks")."""
    if blocks:
        return "blocks" if scores.dtype == jnp.float32 else None
    if scores.dtype == jnp.float32:
        return "f32"
    if scores.dtype == jnp.bfloat16 and scores.shape[1] % 8 == 0:
        return "bf16"
    return None


def _run(op: str, source: str | None, data, lengths, k, starts, members, block_size, emulate):
    if not emulate:
        _mgpu.require_gpu(op)
    why = declines(op, data, k, members is not None, block_size, source)
    if why is not None or source is None:
        raise NotImplementedError(why)
    rows, n = data.shape
    if rows == 0 or n == 0:
        return jnp.full((rows, k), -1, jnp.int32)
    # Ragged rows: position p of row r is column starts[r] + p, the lengths clamped to what
    # follows the start (the reference's shift, so the same positions are visible).
    if starts is not None:
        data, lengths = shift_rows(jnp.asarray(data), starts, jnp.asarray(lengths))
    lengths = _checks.int32(lengths)
    if members is not None:
        members = _checks.int32(members)
        if members.shape[1] == 0:
            members = None
    # The emulator stands in for an H200: its launch plans are the ones an H200 would run.
    sms = _ext.H200.sm_count if emulate else _ext.sm_count()
    threads = mgpu_select.first_threads(rows, n, k, sms)
    run: Callable[..., Any] = mgpu_select.launch
    if emulate:
        data, lengths, run = np.asarray(data), np.asarray(lengths), mgpu_select.emulate
        members = None if members is None else np.asarray(members)
    return mgpu_select.select(
        run, source, data, lengths, k, members=members, block_size=block_size, threads=threads
    )


def topk(scores, lengths, k, starts, candidates, block_size, *, emulate: bool = False):
    return _run("topk", source(scores), scores, lengths, k, starts, candidates, block_size, emulate)


def select_candidate_blocks(
    block_scores, lengths, num_candidates, block_size, *, emulate: bool = False
):
    op, c = "select_candidate_blocks", num_candidates
    return _run(
        op,
        source(block_scores, blocks=True),
        block_scores,
        lengths,
        c,
        None,
        None,
        block_size,
        emulate,
    )
