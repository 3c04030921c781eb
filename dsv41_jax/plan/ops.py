"""The plan of the selection ops: which implementation `topk` and
`select_candidate_blocks` try first, and which CUDA select their `ffi` implementation (and the
fused layers) run, each decision with its reason, resolved at trace time from the call's shapes,
dtypes, k and mask and from a device record.

A `Plan` is a frozen, hashable value: it can be printed, compared, passed to the ops
(`topk(..., plan=p)`) and used as a static argument of `jax.jit`. Forcing a CUDA select is a
field of it (`topk_algorithm=`), so a jitted function traced with another forced select is
traced again (jit keys on its static arguments) instead of reusing a stale trace.

Every decision of these ops lives here, over what each implementation says it can run (its
`supports` and `declines`, in `dsv41_jax.topk`); the implementations run what the plan says. The
filter select's split rows are the CUDA wrapper's default layout (`topk.ffi.split_rows`), which
the plan names in its reason.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dsv41_jax import _checks, _dispatch
from dsv41_jax._device import Device, device_record, no_cuda_select
from dsv41_jax._dispatch import Implementation
from dsv41_jax._ext import DeviceFacts
from dsv41_jax.topk import ffi, mgpu_select, pallas_mgpu
from dsv41_jax.topk.spec import Op, Spec

# Every implementation of both ops; the order of `implementation=None` is a decision below.
IMPLEMENTATIONS = ("ffi", "pallas", "reference")
PALLAS_FIRST, FFI_FIRST = ("pallas", "ffi", "reference"), ("ffi", "pallas", "reference")
# The CUDA selects of any scores (cuda/smxx_{short,filter,cluster}_topk.cu), and the SM90 sparse
# consumer's one-kernel select, which scores and selects a sparse row on chip.
SELECTS = ("short", "filter", "cluster")
ONCHIP = "onchip"
# The short select runs rows over clusters of at least _TWO_WAVES_MIN_CTAS CTAs in up to two
# waves of clusters (rows past the clusters that run at once), shorter rows in one: two waves
# of clusters of 4 and 8 CTAs were faster than the filter select on the H100, three waves and
# two of clusters of 2 (on the H200) were not (BENCHMARKS_HISTORY.md, rows in waves).
_TWO_WAVES_MIN_CTAS = 4


@dataclasses.dataclass(frozen=True)
class Plan:
    """The decisions of one call of `topk` or `select_candidate_blocks`, each with its reason.

    Attributes:
      spec: the call it was resolved for; device: the device record it read.
      implementation: the `implementation=` asked for (None or a tuple of names);
      topk_algorithm: the CUDA select asked for (None: the policy's).
      order: the implementations to try, in order; order_reason: why that order.
      select: the CUDA select the `ffi` implementation runs ("short", "filter" or "cluster"),
        None where the device record has none; select_reason: why.
      runs: the implementation the call runs, the first of `order` that supports it on the
        device (each implementation's `supports`), None where none does; declined: (name, why)
        of those before it.
    """

    spec: Spec
    device: Device
    implementation: tuple[str, ...] | None
    topk_algorithm: str | None
    order: tuple[str, ...]
    order_reason: str
    select: str | None
    select_reason: str
    runs: str | None
    declined: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        # A plan built or edited by hand (`dataclasses.replace`) is checked as `resolve` makes
        # one: an op runs exactly `runs`, so a name it has no implementation of is refused here
        # rather than failing inside the op.
        if not isinstance(self.spec, Spec):
            raise ValueError(f"Plan.spec must be a Spec, got {type(self.spec).__name__}")
        if not isinstance(self.device, Device):
            raise ValueError(f"Plan.device must be a Device, got {type(self.device).__name__}")
        object.__setattr__(self, "implementation", _dispatch.shared(self.implementation))
        check_algorithm(self.topk_algorithm)
        order = self.order
        if (
            not isinstance(order, tuple)
            or not order
            or len(set(order)) != len(order)
            or any(n not in IMPLEMENTATIONS for n in order)
        ):
            raise ValueError(
                f"Plan.order must be a tuple of distinct names of {list(IMPLEMENTATIONS)}, got "
                f"{order!r}"
            )
        if self.select is not None and self.select not in SELECTS:
            raise ValueError(
                f"Plan.select must be None or one of {list(SELECTS)}, got {self.select!r}"
            )
        if self.runs is not None and self.runs not in order:
            raise ValueError(
                f"Plan.runs must be None or one of Plan.order {order}, got {self.runs!r}"
            )
        declined = self.declined
        if not isinstance(declined, tuple) or any(
            not isinstance(d, tuple) or len(d) != 2 or d[0] not in order for d in declined
        ):
            raise ValueError(
                f"Plan.declined must be a tuple of (name of Plan.order, reason), got {declined!r}"
            )
        for name in ("order_reason", "select_reason"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"Plan.{name} must be a string, got {getattr(self, name)!r}")

    def decisions(self) -> tuple[tuple[str, str, str], ...]:
        """(decision, choice, reason) of each decision, for printing."""
        why_runs = "; ".join(f"{n} declines: {why}" for n, why in self.declined)
        return (
            ("implementations", ", ".join(self.order), self.order_reason),
            ("CUDA select", self.select or "none", self.select_reason),
            ("runs", self.runs or "none", why_runs or f"the first of {', '.join(self.order)}"),
        )

    def __str__(self) -> str:
        lines = [f"plan: {self.spec} on {self.device}"]
        lines += [f"  {what}: {choice} ({why})" for what, choice, why in self.decisions()]
        return "\n".join(lines)


def plan(
    op: Op,
    scores: Any,
    k: int,
    *,
    starts: Any = None,
    candidates: Any = None,
    block_size: int = 8,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    device: DeviceFacts | Device | None = None,
) -> Plan:
    """The plan of `topk` (op "topk") or `select_candidate_blocks` (op
    "select_candidate_blocks", `k` = num_candidates) over `scores` (an array or a
    `jax.ShapeDtypeStruct` `[rows, N]`), with that call's `starts`, `candidates`, `block_size`
    and `implementation`.

    `topk_algorithm`: the CUDA select to run wherever it takes the call ("short", "filter",
    "cluster"; "onchip" is the SM90 sparse consumer's only, so here the policy's select runs);
    where it declines, the policy's. `device`: a `DeviceFacts` (e.g. `dsv41_jax.info.H200`) or a
    `Device` record to plan for; None: the device the ops trace for. E.g.
    `print(dsv41_jax.plan("topk", jax.ShapeDtypeStruct((8, 131072), jnp.float32), 512,
    device=dsv41_jax.info.H200))`.

    Raises:
      ValueError: an unknown op, implementation name or select; scores not `[rows, N]`; k or
        block_size not a positive int.
    """
    if len(getattr(scores, "shape", ())) != 2:
        raise ValueError(f"scores must be an array or ShapeDtypeStruct [rows, N], got {scores!r}")
    k = _checks.positive_int(k, "k")
    block_size = _checks.positive_int(block_size, "block_size")
    spec = Spec.of(op, scores, k, starts, candidates, block_size)
    return resolve(spec, implementation, topk_algorithm, device)


def resolve(
    spec: Spec,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    device: DeviceFacts | Device | None = None,
) -> Plan:
    """`plan` of a `Spec`."""
    record = device if isinstance(device, Device) else device_record(device)
    forced = check_algorithm(topk_algorithm)
    if implementation is None:
        order, order_reason = _preferred_order(spec)
    else:
        order = _dispatch.resolve_names(spec.op, IMPLEMENTATIONS, implementation)
        order_reason = f"implementation={implementation!r}, as asked"
    asked = _dispatch.shared(implementation)
    select, select_reason = cuda_select(spec, record, forced)
    declined: list[tuple[str, str]] = []
    runs = None
    for name in order:
        why = supports(name, spec, record, select)
        if why is None:
            runs = name
            break
        declined.append((name, why))
    return Plan(
        spec,
        record,
        asked,
        forced,
        order,
        order_reason,
        select,
        select_reason,
        runs,
        tuple(declined),
    )


def supports(name: str, spec: Spec, device: Device, select: str | None) -> str | None:
    """Why implementation `name` cannot run a call of `spec` on `device` (with `select`, the
    plan's CUDA select, for "ffi"), or None: each implementation's own `supports`."""
    if name == "ffi":
        return ffi.supports(spec, device, select)
    if name == "pallas":
        return pallas_mgpu.supports(spec, device)
    return None  # the reference runs anything the op's checks let through


def check_algorithm(topk_algorithm: str | None) -> str | None:
    """`topk_algorithm` checked: None or one of the CUDA selects (ValueError otherwise)."""
    if topk_algorithm is not None and topk_algorithm not in (*SELECTS, ONCHIP):
        names = sorted((*SELECTS, ONCHIP))
        raise ValueError(f"topk_algorithm must be None or one of {names}, got {topk_algorithm!r}")
    return topk_algorithm


def _preferred_order(spec: Spec) -> tuple[tuple[str, ...], str]:
    """The order of `implementation=None`, by measurement (BENCHMARKS.md): the Pallas select
    first for the masked rows it gathers, where it is fastest; else the CUDA selects (rows of
    up to 16,384 columns, which the short select takes on one CTA, and the longer rows: faster
    than the Pallas select at every width and row count in BENCHMARKS.md, top-k and candidate
    selection alike), then the XLA reference (the slowest by far)."""
    scores = spec.scores()
    blocks = spec.op == "select_candidate_blocks"
    source = pallas_mgpu.source(scores, blocks=blocks)
    masked = spec.mask_blocks is not None
    why = pallas_mgpu.declines(spec.op, scores, spec.k, masked, spec.block_size, source)
    if why is not None:
        return FFI_FIRST, f"the CUDA selects first: {why}"
    if spec.starts:
        return FFI_FIRST, (
            "the CUDA selects first: they read ragged rows (starts) in place, the Pallas select "
            "a shifted copy of them"
        )
    what = "blocks" if blocks else "columns"
    if spec.mask_blocks is not None:
        if mgpu_select.gathers(spec.columns, spec.mask_blocks, spec.block_size):
            return PALLAS_FIRST, (
                f"the Pallas select first: it gathers a mask of {spec.mask_blocks} blocks of "
                f"{spec.block_size} (measured fastest there)"
            )
        return FFI_FIRST, (
            f"the CUDA selects first: the Pallas select does not gather a mask of "
            f"{spec.mask_blocks} blocks of {spec.block_size} over {spec.columns} columns"
        )
    if spec.columns <= mgpu_select.CHUNK:
        return FFI_FIRST, (
            f"the CUDA selects first: rows of {spec.columns} {what} fit the short select's one "
            f"CTA (<= {mgpu_select.CHUNK}; measured faster there than the Pallas select)"
        )
    return FFI_FIRST, (
        f"the CUDA selects first: rows of {spec.columns} {what} (> {mgpu_select.CHUNK}, the "
        "Pallas select's CTA) measured faster there"
    )


def select_declines(select: str, spec: Spec, device: Device) -> str | None:
    """Why the CUDA select `select` cannot take a call of `spec` on `device` (its limits, read
    from the extension: `ffi.declines`), or None."""
    if select == ONCHIP:
        return "the on-chip select takes the sparse consumer's rows only"
    return ffi.declines(select, spec, device)


def cuda_select(
    spec: Spec, device: Device, topk_algorithm: str | None = None
) -> tuple[str | None, str]:
    """(select, reason): the CUDA select for a call, by the measured figures (BENCHMARKS.md,
    top-k rows): the short-row select wherever its cluster holds the row and the rows' clusters
    run at once, or in two waves for rows of 4 or more CTAs (one CTA a row: always); else the
    filter-first select (with its split rows where `split_rows` says), else (k past its limit,
    a mask too large for its shared memory) the cluster radix select. A forced `topk_algorithm`
    runs wherever it takes the call. None where the device has no CUDA select."""
    why_none = no_cuda_select(device)
    if why_none is not None:
        return None, why_none
    forced_why = None
    if topk_algorithm is not None:
        forced_why = select_declines(topk_algorithm, spec, device)
    if topk_algorithm is not None and forced_why is None:
        select, reason = topk_algorithm, f"topk_algorithm={topk_algorithm!r}, as asked"
    else:
        select, reason = _policy(spec, device)
        if forced_why is not None:
            reason += f"; topk_algorithm={topk_algorithm!r} declines: {forced_why}"
    if select == "filter" and (split_why := ffi.split_rows(spec, device)) is not None:
        reason += f"; {split_why}"
    return select, reason


def _policy(spec: Spec, device: Device) -> tuple[str, str]:
    rows, n = spec.rows, spec.columns
    chunk, widest = device.limit("short_topk_chunk"), ffi.short_max_n(device)
    ctas = max(-(-n // chunk), 1)
    if n > widest:
        why_not_short = f"rows of {n} scores (> {widest}, the short-row select's cluster)"
    elif ctas == 1:
        return "short", f"the short-row select: one CTA holds a row of {n} scores (<= {chunk})"
    elif rows <= (at_once := device.clusters_at_once(ctas)):
        return "short", (
            f"the short-row select: the {rows} rows' clusters of {ctas} CTAs run at once "
            f"({at_once} do on this device)"
        )
    elif ctas >= _TWO_WAVES_MIN_CTAS and rows <= 2 * at_once:
        return "short", (
            f"the short-row select: the {rows} rows' clusters of {ctas} CTAs run in two waves "
            f"({at_once} run at once on this device)"
        )
    else:
        waves = "more than two waves" if ctas >= _TWO_WAVES_MIN_CTAS else "waves"
        why_not_short = (
            f"{rows} clusters of {ctas} CTAs would run in {waves} ({at_once} run at once)"
        )
    why_not_filter = select_declines("filter", spec, device)
    if why_not_filter is None:
        return "filter", f"the filter-first select: {why_not_short}"
    return "cluster", (
        f"the cluster radix select: short declines ({why_not_short}), filter declines "
        f"({why_not_filter})"
    )


def sparse_select(
    columns: int,
    k: int,
    block_size: int,
    rows: int,
    device: Device,
    topk_algorithm: str | None = None,
) -> tuple[str | None, str]:
    """(select, reason): the select of the SM90 sparse consumer over its sparse row `[rows,
    columns]` (C * B columns): "onchip", one kernel that scores and selects each row on chip
    without writing its logits, wherever one CTA holds a row's keys (at most
    LIMITS["onchip_max_columns"] columns: faster on the H200 than the alternative at every row
    count measured, BENCHMARKS.md); past that, the sparse logits kernel, then `cuda_select`'s
    select and the column-to-position map. Both are exact: the same selection. A forced
    `topk_algorithm` other than "onchip" takes the logits-then-select form where it takes the
    call."""
    why_none = no_cuda_select(device)
    if why_none is not None:
        return None, why_none
    widest = device.limit("onchip_max_columns")
    if columns <= widest and topk_algorithm in (None, ONCHIP):
        return ONCHIP, f"the on-chip select: one CTA holds a sparse row of {columns} (<= {widest})"
    spec = Spec("topk", rows, columns, "float32", k, block_size=block_size)
    select, reason = cuda_select(spec, device, topk_algorithm)
    if columns > widest:
        reason = f"sparse rows of {columns} columns (> {widest}, on chip): {reason}"
    return select, reason
