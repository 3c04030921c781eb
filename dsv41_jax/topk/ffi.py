"""`implementation="ffi"` of the selection ops: the CUDA exact selects (topk and
select_candidate_blocks: the short-row, filter-first and cluster radix selects, one picked per call
by `algorithm_for`) and the elementwise page transform (logical_to_physical), in cuda/."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _dispatch, _ext

TARGET = "dsv41_logical_to_physical"


def logical_to_physical(indices: jax.Array, block_table: jax.Array, page_size: int) -> jax.Array:
    _ext.require_gpu(TARGET)
    if indices.size == 0:
        return jnp.zeros(indices.shape, jnp.int32)
    out = jax.ShapeDtypeStruct(indices.shape, jnp.int32)
    return jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        _checks.int32(indices),
        _checks.addressable_pages(_checks.int32(block_table), page_size),
        page_size=np.int32(page_size),
    )


CLUSTER_TOPK = "dsv41_cluster_topk"
FILTER_TOPK = "dsv41_filter_topk"
SHORT_TOPK = "dsv41_short_topk"
ALGORITHMS = {"cluster": CLUSTER_TOPK, "filter": FILTER_TOPK, "short": SHORT_TOPK}
# The sparse consumer's one-kernel select (`sparse_algorithm`): not a select of arbitrary scores.
ONCHIP = "onchip"


def cuda_topk(
    scores, lengths, k, starts, members, block_size, mode, algorithm="cluster"
) -> jax.Array:
    """The CUDA exact select over float32 or bfloat16 scores: ascending output, -1 padded. `mode`
    is "positions" (the top-k of visible scores) or "candidate_blocks" (the top-C blocks, newest
    pinned). `algorithm`:
    "cluster" (the cluster radix select, cuda/smxx_cluster_topk.cu), "filter" (filter first,
    cuda/smxx_filter_topk.cu: k up to LIMITS["filter_topk_max_k"]; with a candidate mask it
    reads only the candidate blocks' scores) or "short" (keys in registers,
    cuda/smxx_short_topk.cu: rows of at most `short_max_n()` scores)."""
    target = ALGORITHMS[algorithm]
    _ext.require_gpu(target)
    if scores.dtype not in (jnp.float32, jnp.bfloat16):
        raise NotImplementedError(f"{target}: float32 or bfloat16 scores (got {scores.dtype})")
    if why := _declines(algorithm, scores, k, members, block_size):
        raise NotImplementedError(f"{target}: {why}")
    rows = scores.shape[0]
    if rows == 0:  # never hand XLA a zero-size custom-call operand (see _ext.require_gpu)
        return jnp.zeros((0, k), jnp.int32)
    has_members = members is not None
    if not has_members:  # a dummy column, not [rows, 0]: see _ext.require_gpu
        members = jnp.zeros((rows, 1), jnp.int32)
    if members.shape[1] == 0:  # an empty candidate table: no position qualifies
        return jnp.full((rows, k), -1, jnp.int32)
    out = jax.ShapeDtypeStruct((rows, k), jnp.int32)
    return jax.ffi.ffi_call(target, out, vmap_method="sequential")(
        scores,
        _checks.int32(lengths),
        (jnp.zeros((rows,), jnp.int32) if starts is None else _checks.int32(starts)),
        _checks.int32(members),
        k=np.int32(k),
        block_size=np.int32(block_size),
        mode=np.int32(_ext.limit(f"topk_mode_{mode}")),
        has_starts=starts is not None,
        has_members=has_members,
    )


_forced: str | None = None


@contextlib.contextmanager
def forced_algorithm(algorithm: str) -> Iterator[None]:
    """Within the block, calls traced through the public ops use `algorithm` ("cluster",
    "filter" or "short"; "onchip": the SM90 sparse consumer's one-kernel select, the other calls
    keep their default) wherever it takes the call: the benchmark times whole paths (publish,
    select, the step) with each select. It acts at trace time, so jit functions traced inside the
    block; not for serving code."""
    global _forced
    if algorithm not in (*ALGORITHMS, ONCHIP):
        names = sorted((*ALGORITHMS, ONCHIP))
        raise ValueError(f"algorithm must be one of {names}, got {algorithm!r}")
    previous, _forced = _forced, algorithm
    try:
        yield
    finally:
        _forced = previous


def short_max_n() -> int:
    """The widest row the short-row select takes (its cluster of CTAs holds every key)."""
    return _ext.limit("short_topk_chunk") * _ext.limit("short_topk_max_cluster")


def _declines(algorithm: str, scores, k: int, members, block_size: int) -> str | None:
    """Why a CUDA select cannot take a call (its limits, read from the extension), or None."""
    if algorithm == ONCHIP:
        return "the on-chip select takes the sparse consumer's rows only"
    if algorithm == "short" and scores.shape[1] > short_max_n():
        return f"rows of {scores.shape[1]} scores (> {short_max_n()})"
    if algorithm != "filter":
        return None
    if k > _ext.limit("filter_topk_max_k"):
        return f"k = {k} > {_ext.limit('filter_topk_max_k')}"
    if members is not None and members.shape[1] > 0:
        need = _ext.extension().filter_topk_mask_bytes(
            scores.shape[1], block_size, members.shape[1]
        )
        if need > _ext.limit("filter_topk_mask_smem"):
            return (
                f"the candidate mask needs {need} bytes of shared memory "
                f"(> {_ext.limit('filter_topk_mask_smem')})"
            )
    return None


def algorithm_for(scores, k: int, members, block_size: int) -> str:
    """The CUDA select the public ops use for a call, by the H200 figures (BENCHMARKS.md, top-k
    rows): the short-row select wherever its cluster holds the row and every row's cluster runs
    at once (one CTA a row: always), else the filter-first select, else (k past its limit, a
    mask too large for its shared memory) the cluster radix select. `forced_algorithm`
    overrides it where the forced select takes the call."""
    if _forced is not None and not _declines(_forced, scores, k, members, block_size):
        return _forced
    rows, n = scores.shape
    ctas = max(-(-n // _ext.limit("short_topk_chunk")), 1)
    if n <= short_max_n() and (ctas == 1 or rows <= _ext.short_topk_max_clusters(ctas)):
        return "short"
    if not _declines("filter", scores, k, members, block_size):
        return "filter"
    return "cluster"


def sparse_algorithm(logits, k: int, block_size: int) -> str:
    """The select of the SM90 sparse consumer over its sparse row `logits` [rows, C * 8]:
    "onchip", one kernel that scores and selects each row on chip without writing its logits,
    wherever one CTA holds a row's keys (at most LIMITS["onchip_max_columns"] columns: faster on
    the H200 than the alternative at every row count measured, BENCHMARKS.md); past that, the
    sparse logits kernel, then `algorithm_for`'s select and the column-to-position map. Both are
    exact: the same selection. A forced select (`forced_algorithm`) overrides it where it takes
    the call."""
    fits = logits.shape[1] <= _ext.limit("onchip_max_columns")
    if fits and _forced in (None, ONCHIP):
        return ONCHIP
    return algorithm_for(logits, k, None, block_size)


def topk(scores, lengths, k, starts, candidates, block_size) -> jax.Array:
    _ext.require_gpu(SHORT_TOPK)  # before the policy reads the device
    algorithm = algorithm_for(scores, k, candidates, block_size)
    _dispatch.record("topk: CUDA select", algorithm)
    return cuda_topk(scores, lengths, k, starts, candidates, block_size, "positions", algorithm)


def select_candidate_blocks(block_scores, lengths, num_candidates, block_size) -> jax.Array:
    _ext.require_gpu(SHORT_TOPK)
    algorithm = algorithm_for(block_scores, num_candidates, None, block_size)
    _dispatch.record("select_candidate_blocks: CUDA select", algorithm)
    return cuda_topk(
        block_scores,
        lengths,
        num_candidates,
        None,
        None,
        block_size,
        "candidate_blocks",
        algorithm,
    )
