"""`implementation="ffi"` of the selection ops: the CUDA exact selects (topk and
select_candidate_blocks: the short-row, filter-first and cluster radix selects, one picked per call
by the plan, `dsv41_jax.plan`) and the elementwise page transform (logical_to_physical), in
cuda/."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _dispatch, _ext
from dsv41_jax._device import Device, device_record, ffi_declines
from dsv41_jax.topk.spec import Op, Spec

TARGET = "dsv41_logical_to_physical"


def supports_page_transform(
    device: Device, indices: jax.Array, block_table: jax.Array, page_size: int
) -> str | None:
    """Why `device` runs no page transform kernel (None: it does; any shapes)."""
    return ffi_declines(device, TARGET)


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
# The most rows the filter select splits by default (`split_rows`; the kernel takes up to
# LIMITS["filter_split_max_rows"]).
SPLIT_MAX_ROWS = 8


def short_max_n(device: Device) -> int:
    """The widest row the short-row select takes (its cluster of CTAs holds every key)."""
    return device.limit("short_topk_chunk") * device.limit("short_topk_max_cluster")


def declines(select: str, spec: Spec, device: Device) -> str | None:
    """Why the CUDA select `select` ("short", "filter" or "cluster") cannot take a call of
    `spec` on `device` (its limits, read from the extension), or None."""
    if select == "short" and spec.columns > short_max_n(device):
        return f"rows of {spec.columns} scores (> {short_max_n(device)})"
    if select != "filter":
        return None
    if spec.k > device.limit("filter_topk_max_k"):
        return f"k = {spec.k} > {device.limit('filter_topk_max_k')}"
    if spec.mask_blocks:
        need = _ext.extension().filter_topk_mask_bytes(
            spec.columns, spec.block_size, spec.mask_blocks
        )
        if need > device.limit("filter_topk_mask_smem"):
            return (
                f"the candidate mask needs {need} bytes of shared memory "
                f"(> {device.limit('filter_topk_mask_smem')})"
            )
    return None


def split_rows(spec: Spec, device: Device) -> str | None:
    """Why the filter select splits each row of `spec` over CTAs without a cluster ("split
    rows", docs/topk.md; the caller gives it a workspace, `cuda_topk`), or None: unmasked rows
    longer than the short-row select holds, at most SPLIT_MAX_ROWS of them: a few long rows
    then stream over up to 16 CTAs each, where a cluster holds at most 8. On the H100 split rows
    were faster than clusters at 1, 4 and 8 rows of 1M scores, the clusters at 16 and 32 rows of
    128K, and the short-row select at 128K than either (BENCHMARKS_HISTORY.md, split rows).
    The plan names it in the filter select's reason (`dsv41_jax.plan.cuda_select`)."""
    widest = short_max_n(device)
    if spec.mask_blocks is not None or spec.rows > SPLIT_MAX_ROWS or spec.columns <= widest:
        return None
    if declines("filter", spec, device) is not None:
        return None
    return (
        f"split rows: {spec.rows} unmasked rows (<= {SPLIT_MAX_ROWS}) of {spec.columns} scores "
        f"(> {widest}), each over CTAs without a cluster"
    )


def cuda_topk(
    scores,
    lengths,
    k,
    starts,
    members,
    block_size,
    mode,
    algorithm="cluster",
    split: bool | None = None,
) -> jax.Array:
    """The CUDA exact select over float32 or bfloat16 scores: ascending output, -1 padded. `mode`
    is "positions" (the top-k of visible scores) or "candidate_blocks" (the top-C blocks, newest
    pinned). `algorithm`:
    "cluster" (the cluster radix select, cuda/smxx_cluster_topk.cu), "filter" (filter first,
    cuda/smxx_filter_topk.cu: k up to LIMITS["filter_topk_max_k"]; with a candidate mask it
    reads only the candidate blocks' scores) or "short" (keys in registers,
    cuda/smxx_short_topk.cu: rows of at most `short_max_n` scores). Which one the public
    ops run is the plan's decision (`dsv41_jax.plan.cuda_select`).

    The filter select may split each unmasked row over more CTAs than a cluster holds ("split
    rows", docs/topk.md), merging through a workspace this call allocates
    (LIMITS["filter_split_row_words"] 32-bit words a row, a second result of the custom call).
    `split`: None, where `split_rows` says (few rows longer than the short-row select holds; the
    plan reports it); True, wherever the kernel may (at most
    LIMITS["filter_split_max_rows"] rows: its tests and benchmarks force it so); False, never."""
    target = ALGORITHMS[algorithm]
    _ext.require_gpu(target)
    if scores.dtype not in (jnp.float32, jnp.bfloat16):
        raise NotImplementedError(f"{target}: float32 or bfloat16 scores (got {scores.dtype})")
    op: Op = "topk" if mode == "positions" else "select_candidate_blocks"
    spec = Spec.of(op, scores, k, starts, members, block_size)
    if why := declines(algorithm, spec, device_record()):
        raise NotImplementedError(f"{target}: {why}")
    rows = scores.shape[0]
    if rows == 0:  # never hand XLA a zero-size custom-call operand (see _ext.require_gpu)
        return jnp.zeros((0, k), jnp.int32)
    has_members = members is not None
    if has_members and members.shape[1] == 0:  # an empty candidate table: no position qualifies
        return jnp.full((rows, k), -1, jnp.int32)
    results = [jax.ShapeDtypeStruct((rows, k), jnp.int32)]
    if algorithm == "filter":  # the workspace: one word where no row may be split
        if split is None:
            split = split_rows(spec, device_record()) is not None
        splits = split and not has_members and rows <= _ext.limit("filter_split_max_rows")
        words = rows * _ext.limit("filter_split_row_words") if splits else 1
        results.append(jax.ShapeDtypeStruct((words,), jnp.uint32))
    selected = jax.ffi.ffi_call(target, results, vmap_method="sequential")(
        scores,
        _checks.int32(lengths),
        _checks.UNREAD_ROWS if starts is None else _checks.int32(starts),
        _checks.int32(members) if has_members else _checks.UNREAD_TABLE,
        k=np.int32(k),
        block_size=np.int32(block_size),
        mode=np.int32(_ext.limit(f"topk_mode_{mode}")),
        has_starts=starts is not None,
        has_members=has_members,
    )
    return selected[0]


def supports(spec: Spec, device, select: str | None) -> str | None:
    """Why the CUDA select `select` (the plan's) cannot run a call of `spec` on `device` (a
    `dsv41_jax.plan.Device`), or None: what `cuda_topk` would decline, read by the plan."""
    target = ALGORITHMS.get(select or "short", SHORT_TOPK)
    why = ffi_declines(device, target)
    if why is not None:
        return why
    if select is None:
        return f"{spec.op} ffi: the plan has no CUDA select"
    if spec.dtype not in ("float32", "bfloat16"):
        return f"{target}: float32 or bfloat16 scores (got {spec.dtype})"
    why = declines(select, spec, device)
    return None if why is None else f"{target}: {why}"


def _planned(op: str, select: str | None) -> str:
    """The plan's select, or NotImplementedError where its device record had none (a plan made
    for another device than the one running)."""
    _ext.require_gpu(SHORT_TOPK)
    if select is None:
        raise NotImplementedError(f"{op} ffi: the plan has no CUDA select (made for no CUDA GPU)")
    _dispatch.record(f"{op}: CUDA select", select)
    return select


def topk(scores, lengths, k, starts, candidates, block_size, *, select: str | None) -> jax.Array:
    """`dsv41_jax.topk` through the CUDA select `select` (the plan's)."""
    select = _planned("topk", select)
    return cuda_topk(scores, lengths, k, starts, candidates, block_size, "positions", select)


def select_candidate_blocks(
    block_scores, lengths, num_candidates, block_size, *, select: str | None
) -> jax.Array:
    """`dsv41_jax.select_candidate_blocks` through the CUDA select `select` (the plan's)."""
    select = _planned("select_candidate_blocks", select)
    return cuda_topk(
        block_scores,
        lengths,
        num_candidates,
        None,
        None,
        block_size,
        "candidate_blocks",
        select,
    )
