"""`implementation="ffi"` of the logits ops: DeepGEMM's kernels through XLA FFI.

Which kernel family runs is the plan's decision (`kernel_family`: "sm90" or "sm100", by the device
record's compute capability), and what each family takes is its `*_supports` function, read by
the plan before anything is traced (`dsv41_jax._dispatch.OpPlan`):

paged_mqa_logits:
- SM90 (DeepGEMM's FP8 paged kernel): fp8 cache, head_dim 128, page 64, 32 or 64 heads, next_n 1
  or 2, `num_columns` a multiple of 256 covering the page table (the kernel writes whole
  256-position splits).
- SM100 (DeepGEMM's unified MXFP4 paged kernel; its status: "sm100 paged logits" in
  docs/status.md): mxfp4 cache, head_dim 128, page 64 or 128, 32 heads; bf16 weights and logits
  inside the kernel, returned as float32.
Columns at or past a row's length are left as the kernel wrote them (unspecified): no
selection op reads them. Positions on invalid page ids are NaN, as in the reference. Called
directly, each function raises NotImplementedError for inputs its kernel does not take.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from dsv41_jax import _checks, _ext
from dsv41_jax._device import Device, device_record, ffi_declines
from dsv41_jax.rows import clamp_lengths, prefill_ranges, row_block_table, row_lengths
from dsv41_jax.types import CandidateTable, KeyBuffer, PagedIndexCache, QueryBundle

TARGET = "dsv41_sm90_paged_mqa_logits"
SM100_TARGET = "dsv41_sm100_paged_mqa_logits"
SPARSE_TARGET = "dsv41_sm100_paged_sparse_mqa_logits"
SM90_SPARSE_TARGET = "dsv41_sm90_sparse_logits"
RAGGED_TARGET = "dsv41_sm90_mqa_logits"
SM100_RAGGED_TARGET = "dsv41_sm100_mqa_logits"
Checks = Sequence[tuple[bool, str]]


def kernel_family(device: Device) -> str:
    """The kernel family the logits ops run on `device`: "sm100" on compute capability 10.0,
    else "sm90" (on any other GPU the `*_supports` functions decline first)."""
    return "sm100" if device.compute_capability in _ext.SM100 else "sm90"


def _first(target: str, checks: Checks) -> str | None:
    """The first unsupported input of `checks` ((bad, why) pairs), named with its target."""
    return next((f"{target}: {why}" for bad, why in checks if bad), None)


def _require(why: str | None) -> None:
    """NotImplementedError with `why` (a `*_supports` answer) unless it is None."""
    if why is not None:
        raise NotImplementedError(why)


def _family(kernel: str | None, here: Device) -> str:
    """The kernel family to run: `kernel` (the plan's) when it is this device's, this device's
    when None; NotImplementedError for a plan's family this device has no kernel of."""
    mine = kernel_family(here)
    if kernel is not None and kernel != mine:
        raise NotImplementedError(f"no {kernel} kernel on this device (it runs {mine})")
    return mine


def _sm100_query(query: QueryBundle):
    """An MXFP4 QueryBundle as DeepGEMM's SM100 kernels take it: packed e2m1 `[rows, 32, 64]`,
    the 4 ue8m0 exponents of each head as one int32 `[rows, 32]`, bf16 weights `[rows, 32]`."""
    rows = query.num_rows
    assert query.scales is not None  # mxfp4 queries carry their exponents (checked by the API)
    return (
        query.values.reshape(rows, 32, 64),
        jax.lax.bitcast_convert_type(query.scales.reshape(rows, 32, 4), jnp.int32),
        query.weights.reshape(rows, 32).astype(jnp.bfloat16),
    )


def paged_supports(
    device: Device,
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    num_columns: int,
) -> str | None:
    """Why `device` runs no paged logits kernel for these inputs (None: it does)."""
    why = ffi_declines(device, f"{TARGET} / {SM100_TARGET}", _ext.SM90 + _ext.SM100)
    if why is not None:
        return why
    if kernel_family(device) == "sm100":
        return _first(SM100_TARGET, _sm100_paged_unsupported(device, query, cache, block_table))
    why = sm90_paged_declines(device, query, cache, block_table.shape[1], num_columns)
    return None if why is None else f"{TARGET}: {why}"


def paged_mqa_logits(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    num_columns: int,
    *,
    kernel: str | None = None,
) -> jax.Array:
    """The paged logits through `kernel` ("sm90" or "sm100", the plan's; None: this device's)."""
    _ext.require_gpu(f"{TARGET} / {SM100_TARGET}", _ext.SM90 + _ext.SM100)
    here = device_record()
    _require(paged_supports(here, query, cache, context_lens, block_table, num_columns))
    if _family(kernel, here) == "sm100":
        return paged_mqa_logits_sm100(query, cache, context_lens, block_table, num_columns)
    max_pages = block_table.shape[1]
    # The kernel trusts lengths: clamp them to the page table so nothing is read past it.
    lens = clamp_lengths(context_lens, max_pages * 64)
    out = (
        jax.ShapeDtypeStruct((query.num_rows, num_columns), jnp.float32),
        jax.ShapeDtypeStruct((_ext.limit("sm90_schedule_rows"), 2), jnp.int32),
    )
    logits, _ = jax.ffi.ffi_call(TARGET, out, vmap_method="sequential")(
        query.values, query.weights, cache.data, lens, _checks.int32(block_table)
    )
    return logits


def sm90_paged_declines(
    device: Device, query, cache, max_pages: int, num_columns: int
) -> str | None:
    """Why DeepGEMM's SM90 paged kernel cannot score these inputs (None: it can); `device`
    holds the extension's limits."""
    max_batch = device.limit("sm90_max_batch")
    checks = [
        (cache.format != "fp8", "needs the fp8 cache"),
        (cache.head_dim != 128 or cache.page_size != 64, "needs head_dim 128 and page_size 64"),
        (query.num_heads not in (32, 64), "needs 32 or 64 heads"),
        (query.next_n not in (1, 2), "needs next_n 1 or 2"),
        (
            num_columns % 256 or num_columns < max_pages * 64,
            "needs num_columns a multiple of 256 covering the page table",
        ),
        (query.batch > max_batch, f"needs at most {max_batch} requests"),
        (query.batch == 0 or max_pages == 0 or cache.num_pages == 0, "needs non-empty inputs"),
    ]
    return next((why for bad, why in checks if bad), None)


def _sm100_paged_unsupported(device: Device, query, cache, block_table) -> Checks:
    max_pages, p = block_table.shape[1], cache.page_size
    max_rows = device.limit("sm100_max_rows")
    return [
        (cache.format != "mxfp4", "needs the mxfp4 cache (SM100 has no fp8 dense kernel here)"),
        (cache.head_dim != 128 or p not in (64, 128), "needs head_dim 128 and page 64 or 128"),
        (query.num_heads != 32, "needs 32 heads"),
        (query.num_rows > max_rows, f"needs at most {max_rows} query rows"),
        (query.num_rows == 0 or max_pages == 0 or cache.num_pages == 0, "needs non-empty inputs"),
    ]


def paged_mqa_logits_sm100(query, cache, context_lens, block_table, num_columns):
    """Blackwell: DeepGEMM's SM100 paged kernel (MXFP4; status: docs/status.md). The kernel reads
    a page id outside the cache as TMA's zero fill; those visible positions are set to NaN here,
    in the same pass that widens its bf16 logits to float32. The caller has checked the inputs
    (`paged_supports`)."""
    max_pages, p = block_table.shape[1], cache.page_size
    rows, n = query.num_rows, query.next_n
    lens = row_lengths(context_lens, n, min(max_pages * p, num_columns))
    bt = row_block_table(block_table, n)
    split = _ext.limit("sm100_logits_split")  # the kernel writes whole splits of positions
    width = -(-max(num_columns, max_pages * p) // split) * split
    out = (
        jax.ShapeDtypeStruct((rows, width), jnp.bfloat16),
        jax.ShapeDtypeStruct((_ext.limit("sm100_num_sms") + 1, 2), jnp.int32),
    )
    logits, _ = jax.ffi.ffi_call(SM100_TARGET, out, vmap_method="sequential")(
        *_sm100_query(query),
        cache.data,
        lens,
        bt,
        jnp.arange(rows, dtype=jnp.int32) // n,  # a request's rows share its KV pass
    )
    col = jnp.arange(num_columns, dtype=jnp.int32)
    page_ok = (bt >= 0) & (bt < cache.num_pages)
    on_bad_page = ~jnp.take(page_ok, jnp.minimum(col // p, max_pages - 1), axis=1)
    bad = on_bad_page & (col[None] < lens[:, None])
    return jnp.where(bad, jnp.nan, logits[:, :num_columns].astype(jnp.float32))


def _sm90_sparse_unsupported(device: Device, query, cache, num_candidates, block_size) -> Checks:
    c, max_rows = num_candidates, device.limit("sm90_sparse_max_rows")
    return [
        (cache.format != "fp8", "needs the fp8 cache"),
        (cache.head_dim != 128 or cache.page_size != 64, "needs head_dim 128 and page_size 64"),
        (block_size != 8, "needs candidate blocks of 8"),
        (query.num_heads not in (32, 64), "needs 32 or 64 heads"),
        (c % 8 or c == 0, "needs C a positive multiple of 8 (whole 64-position tiles)"),
        (query.num_rows > max_rows, f"needs at most {max_rows} query rows"),
        (query.num_rows == 0 or cache.num_pages == 0, "needs non-empty inputs"),
    ]


def _sm100_sparse_unsupported(device: Device, query, cache, num_candidates, block_size) -> Checks:
    c, b = device.limit("sm100_sparse_candidates"), device.limit("sm100_sparse_block")
    return [
        (cache.format != "mxfp4", "needs the mxfp4 cache (the fp8 path wants MXFP8 scales)"),
        (cache.head_dim != 128 or cache.page_size not in (64, 128), "needs D 128, page 64/128"),
        (query.num_heads != 32, "needs 32 heads"),
        (num_candidates != c or block_size != b, f"needs C {c} blocks of {b}"),
    ]


def sparse_declines(
    device: Device, query, cache, num_candidates: int, block_size: int
) -> str | None:
    """Why `device` (a `dsv41_jax.plan.Device` record) runs no sparse logits kernel for these
    inputs (None: it does): the device first, then every input its family's kernel ("sm90":
    fp8 cache, "sm100": mxfp4) does not take. Static: reads shapes and the record only, so the
    plan can choose a consumer's path, and whether a layer fuses, before tracing either."""
    why = ffi_declines(device, f"{SM90_SPARSE_TARGET} / {SPARSE_TARGET}", _ext.SM90 + _ext.SM100)
    if why is not None:
        return why
    sm100 = kernel_family(device) == "sm100"
    target, unsupported = (
        (SPARSE_TARGET, _sm100_sparse_unsupported)
        if sm100
        else (SM90_SPARSE_TARGET, _sm90_sparse_unsupported)
    )
    checks = unsupported(device, query, cache, num_candidates, block_size)
    reasons = [why for bad, why in checks if bad]
    return f"{target}: {'; '.join(reasons)}" if reasons else None


def sparse_supports(
    device: Device,
    query: QueryBundle,
    cache: PagedIndexCache,
    table: CandidateTable,
    row_lens: jax.Array,
    row_block_table: jax.Array,
    block_size: int,
) -> str | None:
    """Why `device` runs no sparse logits kernel for these inputs (None: it does): the op's
    `sparse_declines`."""
    return sparse_declines(device, query, cache, table.num_candidates, block_size)


def sparse_paged_mqa_logits(
    query, cache, table, row_lens, row_block_table, block_size, *, kernel: str | None = None
):
    """The sparse logits through `kernel` ("sm90": fp8 cache, "sm100": mxfp4; the plan's; None:
    this device's)."""
    _ext.require_gpu(f"{SM90_SPARSE_TARGET} / {SPARSE_TARGET}", _ext.SM90 + _ext.SM100)
    # Each family's function checks the inputs its kernel takes (they are also called directly).
    if _family(kernel, device_record()) == "sm90":
        return sparse_paged_mqa_logits_sm90(query, cache, table, block_size)
    return sparse_paged_mqa_logits_sm100(query, cache, table, row_block_table, block_size)


def sparse_paged_mqa_logits_sm90(query, cache, table, block_size):
    """Hopper: each row's candidate blocks scored where they lie in the paged cache, one kernel
    (ffi/sm90_sparse_logits.cu) whose instructions and head-reduction order are those of
    DeepGEMM's dense SM90 kernel, so a position's logit is bitwise its `paged_mqa_logits` logit.
    float32 `[rows, C·B]`, columns past `valid_lens` unspecified; blocks on pages outside the
    cache (or padding slots) read as NaN. NotImplementedError for inputs the kernel does not
    take."""
    rows, c = table.physical.shape
    checks = _sm90_sparse_unsupported(device_record(), query, cache, c, block_size)
    _require(_first(SM90_SPARSE_TARGET, checks))
    out = jax.ShapeDtypeStruct((rows, c * block_size), jnp.float32)
    return jax.ffi.ffi_call(SM90_SPARSE_TARGET, out, vmap_method="sequential")(
        query.values,
        query.weights,
        cache.data,
        _checks.int32(table.physical),
        _checks.int32(table.valid_lens),
    )


def sparse_paged_mqa_logits_sm100(query, cache, table, row_block_table, block_size):
    """DeepGEMM's SM100 paged sparse MQA logits: bf16 `[rows, 16384]`, columns past
    `table.valid_lens` unspecified (its status: "sm100 sparse logits" in docs/status.md).
    NotImplementedError for inputs the kernel does not take."""
    c = table.num_candidates
    checks = _sm100_sparse_unsupported(device_record(), query, cache, c, block_size)
    _require(_first(SPARSE_TARGET, checks))
    rows = query.num_rows
    meta_bytes, work_bytes = _ext.extension().sm100_sparse_workspace_bytes(rows)
    # Consecutive rows of one request (speculative rows) share a KV pass in DeepGEMM's schedule.
    request_ids = jnp.arange(rows, dtype=jnp.int32) // query.next_n
    out = (
        jax.ShapeDtypeStruct((rows, c * block_size), jnp.bfloat16),  # C·B: declined otherwise
        jax.ShapeDtypeStruct((meta_bytes,), jnp.uint8),
        jax.ShapeDtypeStruct((work_bytes,), jnp.uint8),
    )
    logits, _, _ = jax.ffi.ffi_call(SPARSE_TARGET, out, vmap_method="sequential")(
        *_sm100_query(query),
        cache.data,
        table.valid_lens.astype(jnp.int32),
        _checks.int32(row_block_table),
        request_ids,
        table.blocks.astype(jnp.int32),
    )
    return logits


def ragged_supports(
    device: Device,
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    relative: bool,
) -> str | None:
    """Why `device` runs no prefill logits kernel for these inputs (None: it does)."""
    why = ffi_declines(device, f"{RAGGED_TARGET} / {SM100_RAGGED_TARGET}", _ext.SM90 + _ext.SM100)
    if why is not None:
        return why
    checks = [
        (keys.head_dim != 128, "needs head_dim 128"),
        (keys.num_tokens >= 2**31, "needs fewer than 2^31 keys"),
    ]
    if kernel_family(device) == "sm100":
        checks += [
            (keys.format != "mxfp4", "needs mxfp4 keys"),
            (query.num_heads != 32, "needs 32 heads"),
        ]
        return _first(SM100_RAGGED_TARGET, checks)
    checks += [
        (keys.format != "fp8", "needs fp8 keys"),
        (query.num_heads not in (32, 64), "needs 32 or 64 heads"),
    ]
    return _first(RAGGED_TARGET, checks)


def mqa_logits(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    relative: bool,
    *,
    kernel: str | None = None,
) -> jax.Array:
    """Ragged prefill logits through DeepGEMM's kernels, which write the relative layout: SM90
    `sm90_fp8_mqa_logits` (fp8 keys, 32 or 64 heads) or SM100 `sm100_mqa_logits` (MXFP4 keys,
    32 heads, bf16 inside the kernel; status: docs/status.md), by `kernel` (the plan's; None:
    this device's). The handlers clamp the ranges and write -inf past each row's range.
    `relative=False` moves every row to its absolute columns in one more XLA pass."""
    _ext.require_gpu(f"{RAGGED_TARGET} / {SM100_RAGGED_TARGET}", _ext.SM90 + _ext.SM100)
    here = device_record()
    _require(ragged_supports(here, query, keys, starts, ends, relative))
    sm100 = _family(kernel, here) == "sm100"
    target = SM100_RAGGED_TARGET if sm100 else RAGGED_TARGET
    rows, n = query.num_rows, keys.num_tokens
    if rows == 0 or n == 0:  # never hand XLA a zero-size custom-call operand
        return jnp.full((rows, n), -jnp.inf, jnp.float32)
    out = (
        jax.ShapeDtypeStruct((rows, n), jnp.bfloat16 if sm100 else jnp.float32),
        # the clamped ranges, for the rows rounded up to a whole query block
        jax.ShapeDtypeStruct((2, rows + _ext.limit("mqa_row_padding")), jnp.int32),
    )
    starts, ends = _checks.int32(starts), _checks.int32(ends)
    if sm100:
        operands = (
            *_sm100_query(query),
            keys.values,
            jax.lax.bitcast_convert_type(keys.scales, jnp.int32),
        )
    else:
        operands = (query.values, query.weights, keys.values, keys.scales)
    logits, _ = jax.ffi.ffi_call(target, out, vmap_method="sequential")(*operands, starts, ends)
    logits = logits.astype(jnp.float32)
    if relative:
        return logits
    ks, ke = (x[:, None] for x in prefill_ranges(starts, ends, n))
    t = jnp.arange(n)[None]
    moved = jnp.take_along_axis(logits, jnp.clip(t - ks, 0, n - 1), axis=1)
    return jnp.where((t >= ks) & (t < ke), moved, -jnp.inf)
