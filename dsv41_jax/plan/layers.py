"""The decisions of the indexer's layers and of a decode step, each with its reason: how a
consumer selects (dense, inside the table's mask, or over the sparse row), whether the source's
table is every block, and whether a layer runs as one custom call.

They read only shapes, the config, the caller's `path` / `implementation` / `fuse` and a device
record (`dsv41_jax.plan.device_record`), so they are made before anything is traced and can be
printed, compared and tested for any device (`TwoLevelIndexer.plan`, `dsv41_jax.info`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from dsv41_jax import _dispatch, _ext
from dsv41_jax._device import Device, device_record, ffi_declines
from dsv41_jax._dispatch import record
from dsv41_jax.config import IndexerConfig
from dsv41_jax.logits import ffi as logits_ffi
from dsv41_jax.logits.api import logits_width
from dsv41_jax.plan.ops import check_algorithm, cuda_select, sparse_select
from dsv41_jax.topk.spec import Spec

Role = Literal["source", "consumer", "plain"]
Route = Literal["dense", "mask", "sparse"]
Path = Literal["auto", "mask", "sparse"]
PATHS: tuple[Path, ...] = ("auto", "mask", "sparse")
FUSED, UNFUSED = "fused (one custom call)", "op by op"
# The step at 16K positions is faster sparse from 8 rows, dense at 1 (H200, H100: BENCHMARKS.md).
OWN_TABLE_SPARSE_MIN_ROWS = 8
# A table from elsewhere over at most C·B positions (the sparse path rebuilds it first): one
# select at 16K positions is faster sparse at 64 rows, through the mask at 1 and 8 (H200, H100:
# BENCHMARKS.md).
TABLE_SPARSE_MIN_ROWS = 64


@dataclasses.dataclass(frozen=True)
class QueryShape:
    """What the decisions read of a layer's QueryBundle."""

    batch: int
    next_n: int
    num_heads: int

    @property
    def num_rows(self) -> int:
        return self.batch * self.next_n


@dataclasses.dataclass(frozen=True)
class CacheShape:
    """What the decisions read of a layer's PagedIndexCache."""

    format: str
    head_dim: int
    page_size: int
    num_pages: int


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One indexer layer of a decode step as its decisions see it: its role ("source" publishes
    the table, "consumer" selects inside it, "plain" over its whole context), its query's and
    cache's shapes, the page table's `max_pages`, the config's k, C and B, and (consumers)
    whether the table is the one its step just published (`own_table`)."""

    role: Role
    query: QueryShape
    cache: CacheShape
    max_pages: int
    k: int
    num_candidates: int
    block_size: int
    own_table: bool = False

    @classmethod
    def of(
        cls,
        role: Role,
        query: Any,
        cache: Any,
        block_table: Any,
        config: IndexerConfig,
        own_table: bool = False,
    ) -> LayerSpec:
        """The spec of a layer over `query` (a QueryBundle), `cache` (a PagedIndexCache) and
        `block_table` (an array or `jax.ShapeDtypeStruct` `[batch, max_pages]`)."""
        return cls(
            role,
            QueryShape(int(query.batch), int(query.next_n), int(query.num_heads)),
            CacheShape(
                str(cache.format), int(cache.head_dim), int(cache.page_size), int(cache.num_pages)
            ),
            int(block_table.shape[1]),
            int(config.index_topk),
            int(config.candidate_topk_blocks),
            int(config.candidate_block_size),
            bool(own_table),
        )

    @property
    def capacity(self) -> int:
        """Positions a request's page table holds."""
        return self.max_pages * self.cache.page_size

    @property
    def logits_width(self) -> int:
        """The width of the layer's dense logits (`paged_mqa_logits`' default)."""
        return logits_width(self.max_pages, self.cache.page_size)

    def __str__(self) -> str:
        q, c = self.query, self.cache
        return (
            f"{self.role} layer, {q.batch} x {q.next_n} rows of {q.num_heads} heads, "
            f"{c.format} cache of pages of {c.page_size}, page table of {self.max_pages}, "
            f"k={self.k}, C={self.num_candidates}, B={self.block_size}"
        )


@dataclasses.dataclass(frozen=True)
class Decision:
    """One decision and its reason, for the decisions that are a single choice: a fused
    layer's CUDA select (`what`: "topk" over the dense logits, "masked topk" inside the table's
    blocks, "candidate blocks" the top-C of the block scores, "sparse topk" over the sparse
    row), and the sharded entry points' (`dsv41_jax.plan.sharded`)."""

    what: str
    choice: str
    reason: str

    def decisions(self) -> tuple[tuple[str, str, str], ...]:
        """(decision, choice, reason), for printing (`dsv41_jax.info.Choice`)."""
        return ((self.what, self.choice, self.reason),)


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """The decisions of one layer, each with its reason.

    Attributes:
      spec: the layer; device: the device record read; implementation: the preference order
        asked for (None: every op's own); path: the consumer path asked for.
      route: how the layer selects: "dense" (the top-k over its whole context: a source, a
        plain layer, or a consumer whose own table holds every block, under
        OWN_TABLE_SPARSE_MIN_ROWS query rows or without a sparse kernel), "mask" or "sparse";
        route_reason: why; declined: (route, why) of a route "auto" passed over.
      every_block: (source) the table is every block of each row, without block scores or
        their top-C; blocks_reason: why (or why not).
      fused: the layer runs as one custom call (`dsv41_jax.fused`); fused_reason: why not (or
        what it takes).
      topk_algorithm: the CUDA select asked for (None: the policy's).
      selects: (fused layers) the CUDA selects the layer's call runs, in its order, as
        Decisions (an op by op layer's selection ops plan their own calls).
    """

    spec: LayerSpec
    device: Device
    implementation: tuple[str, ...] | None
    path: Path
    route: Route
    route_reason: str
    declined: tuple[tuple[str, str], ...]
    every_block: bool
    blocks_reason: str
    fused: bool
    fused_reason: str
    topk_algorithm: str | None = None
    selects: tuple[Decision, ...] = ()

    @property
    def op(self) -> str:
        """The layer's entry point: "publish" (the source) or "select"."""
        return "publish" if self.spec.role == "source" else "select"

    def decisions(self) -> tuple[tuple[str, str, str], ...]:
        """(decision, choice, reason) of each decision, for printing."""
        out: list[tuple[str, str, str]] = []
        if self.spec.role == "consumer":
            out.append(("consumer path", self.route, self.route_reason))
        if self.spec.role == "source":
            choice = "every block" if self.every_block else "the top-C blocks"
            out.append(("candidate blocks", choice, self.blocks_reason))
        out.append(("layer", FUSED if self.fused else UNFUSED, self.fused_reason))
        out += [(f"CUDA select, {s.what}", s.choice, s.reason) for s in self.selects]
        return tuple(out)

    @property
    def top_select(self) -> str:
        """The select of the fused layer's top-k (ValueError when the layer is not fused)."""
        if not self.selects:
            raise ValueError(f"the layer runs op by op; its ops plan their selects ({self})")
        return self.selects[0].choice

    @property
    def blocks_select(self) -> str | None:
        """The select of the fused source's top-C blocks (None: it runs none)."""
        return next((s.choice for s in self.selects if s.what == "candidate blocks"), None)

    def record(self) -> None:
        """Note the decisions for `dsv41_jax.info.explain` (nothing when it is not tracing)."""
        if self.spec.role == "consumer":
            label = "dense (every block is a candidate)" if self.route == "dense" else self.route
            record("select: consumer path", label, self.declined)
        if self.fused:
            record(f"{self.op}: layer", FUSED)
            for s in self.selects:
                record(f"fused {s.what}: CUDA select", s.choice, plan=s)
        else:
            record(f"{self.op}: layer", UNFUSED, [("fused", self.fused_reason)])

    def __str__(self) -> str:
        lines = [f"plan: {self.spec} on {self.device}"]
        lines += [f"  {what}: {choice} ({why})" for what, choice, why in self.decisions()]
        return "\n".join(lines)


def _route(
    spec: LayerSpec, device: Device, path: Path, implementation: tuple[str, ...] | None
) -> tuple[Route, str, tuple[tuple[str, str], ...]]:
    """(route, reason, declined) of a layer; ValueError for `path="sparse"` on a GPU without a
    sparse kernel for the inputs."""
    if spec.role == "source":
        return "dense", "the source scores every position", ()
    if spec.role == "plain":
        return "dense", "a plain layer selects over its whole context", ()
    c, b = spec.num_candidates, spec.block_size
    # Page tables of at most C·B positions: the sparse row is the whole row. A table from
    # elsewhere takes the mask path under TABLE_SPARSE_MIN_ROWS query rows. A table this step
    # published holds every block, so the dense top-k is the answer without the mask, the
    # faster one under OWN_TABLE_SPARSE_MIN_ROWS query rows. From those row counts the sparse
    # row is faster, where this GPU has a sparse kernel for it.
    fits = spec.capacity <= c * b
    declines = logits_ffi.sparse_declines(device, spec.query, spec.cache, c, b)
    if path == "auto":
        unavailable = declines
        if unavailable is None and implementation is not None and "ffi" not in implementation:
            unavailable = f"implementation={implementation!r} excludes 'ffi' (the sparse kernels)"
        if not fits:
            if unavailable is None:
                why = "path='auto': this GPU has a sparse logits kernel for the inputs"
                return "sparse", why, ()
            return (
                "mask",
                f"path='auto': the sparse path declines ({unavailable})",
                (("sparse", unavailable),),
            )
        own, rows = spec.own_table, spec.query.num_rows
        least = OWN_TABLE_SPARSE_MIN_ROWS if own else TABLE_SPARSE_MIN_ROWS
        if own:
            within = (
                f"every block is a candidate: the page table holds at most C·B = {c * b} positions"
            )
        else:
            within = (
                f"the page table holds at most C·B = {c * b} positions a row "
                "(the sparse row would be the whole row)"
            )
        if rows < least:  # the reason on any device
            passed_over = (
                f"{rows} query row{'s' if rows != 1 else ''}, fewer than {least}: the "
                f"{'dense top-k' if own else 'mask path'} is faster there"
            )
        elif unavailable is None:
            why = (
                f"path='auto': {within}, but from {least} query rows (here {rows}) the sparse "
                "row is faster, and this GPU has a sparse logits kernel for the inputs"
            )
            return "sparse", why, ()
        else:
            passed_over = unavailable
        if own:
            return "dense", within, (("sparse", passed_over),)
        why = f"{within}; {passed_over}"
        return "mask", f"path='auto': the sparse path declines ({why})", (("sparse", why),)
    if path == "sparse" and declines is not None and device.backend == "gpu":
        if implementation != ("reference",):
            raise ValueError(
                f"select(path='sparse'): no sparse logits kernel on this GPU for these inputs "
                f"({declines}); use path='mask' (or 'auto'), or implementation='reference' to "
                "run the slow sparse reference"
            )
    return path, f"path={path!r}, as asked", ()


def every_block_table(width: int, num_candidates: int, block_size: int) -> tuple[bool, str]:
    """(whether, why) a source's table over logits rows of `width` is every block of each row:
    no row can have more than C blocks, so the top-C of the block scores would be every block
    (the block scores and their top-C, two kernels, are skipped)."""
    c, b = num_candidates, block_size
    nb = -(-width // b)
    if nb <= c:
        return True, f"rows of {width} logits hold {nb} <= C = {c} blocks of {b}"
    return False, f"rows of {width} logits hold {nb} > C = {c} blocks of {b}"


def layer_selects(
    spec: LayerSpec,
    device: Device,
    route: Route,
    every_block: bool,
    topk_algorithm: str | None,
) -> tuple[Decision, ...]:
    """The CUDA selects of a fused layer taking `route`, in the order its call runs them (the
    selection ops' policy, `dsv41_jax.plan.ops`, over the layer's shapes): the source's top-k
    and (unless its table is every block) top-C of the block scores, a consumer's top-k over
    its dense row, inside the table's blocks, or over the sparse row."""
    rows, width = spec.query.num_rows, spec.logits_width
    k, c, b = spec.k, spec.num_candidates, spec.block_size
    if route == "sparse":
        select, why = sparse_select(c * b, k, b, rows, device, topk_algorithm)
        assert select is not None, why  # a fused layer runs on a GPU with the extension
        return (Decision("sparse topk", select, why),)
    mask = c if spec.role == "consumer" and route == "mask" else None
    what = "topk" if mask is None else "masked topk"
    specs = [(what, Spec("topk", rows, width, "float32", k, mask_blocks=mask, block_size=b))]
    if spec.role == "source" and not every_block:
        blocks = Spec("select_candidate_blocks", rows, -(-width // b), "float32", c, block_size=b)
        specs.append(("candidate blocks", blocks))
    out = []
    for what, s in specs:
        select, why = cuda_select(s, device, topk_algorithm)
        assert select is not None, why
        out.append(Decision(what, select, why))
    return tuple(out)


def fused_declines(
    spec: LayerSpec,
    device: Device,
    implementation: tuple[str, ...] | None,
    route: Route = "dense",
    unfused: str | None = None,
) -> str | None:
    """Why a layer taking `route` does not run as one custom call (None: it does). It does where
    its ops would all run their FFI kernels: `implementation` None or preferring "ffi", an SM90
    GPU with the extension, the inputs DeepGEMM's paged kernel takes (and, on the sparse route,
    the SM90 sparse kernel's), and the caller did not ask for the ops one by one (`unfused`:
    the reason it did, e.g. "fuse=False, as asked")."""
    if unfused is not None:
        return unfused
    if implementation is not None and implementation[0] != "ffi":
        return f"implementation {implementation!r} does not prefer 'ffi'"
    why = ffi_declines(device, "the fused layers", _ext.SM90)
    if why is None:
        why = logits_ffi.sm90_paged_declines(
            device, spec.query, spec.cache, spec.max_pages, spec.logits_width
        )
    if why is None and route == "sparse":
        why = logits_ffi.sparse_declines(
            device, spec.query, spec.cache, spec.num_candidates, spec.block_size
        )
    return why


def plan_layer(
    spec: LayerSpec,
    device: Device | None = None,
    *,
    path: Path = "auto",
    implementation: _dispatch.Implementation = None,
    unfused: str | None = None,
    topk_algorithm: str | None = None,
) -> LayerPlan:
    """The plan of one layer on `device` (None: the device the ops trace for). `path`: the
    consumer path asked for; `implementation`, `topk_algorithm`: as in `publish`; `unfused`:
    why the caller runs the layer op by op (None: it may fuse).

    Raises:
      ValueError: an unknown path or implementation name; `path="sparse"` on a GPU without a
        sparse logits kernel for the inputs (unless `implementation="reference"`).
    """
    if path not in PATHS:
        raise ValueError(f"path must be 'auto', 'mask' or 'sparse', got {path!r}")
    record_ = device if device is not None else device_record()
    impl = _dispatch.shared(implementation)
    route, route_reason, declined = _route(spec, record_, path, impl)
    every, blocks_reason = False, "not a source layer"
    if spec.role == "source":
        every, blocks_reason = every_block_table(
            spec.logits_width, spec.num_candidates, spec.block_size
        )
    forced = check_algorithm(topk_algorithm)
    why = fused_declines(spec, record_, impl, route, unfused)
    fused_reason = why if why is not None else "every op of the layer runs its FFI kernel"
    selects = () if why is not None else layer_selects(spec, record_, route, every, forced)
    return LayerPlan(
        spec,
        record_,
        impl,
        path,
        route,
        route_reason,
        declined,
        every,
        blocks_reason,
        why is None,
        fused_reason,
        forced,
        selects,
    )


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """The decisions of one decode step: each layer's plan in the order the step runs them
    (`layers`: (layer id, LayerPlan)). The step runs its layers one at a time, as a model
    calls them (`TwoLevelIndexer.decode_layer`); the lengths and DeepGEMM's schedule are
    computed once for the fused layers (`shared`: some layer runs fused)."""

    layers: tuple[tuple[int, LayerPlan], ...]

    @property
    def shared(self) -> bool:
        """The lengths and DeepGEMM's schedule are computed once for the fused layers."""
        return any(p.fused for _, p in self.layers)

    def layer(self, layer_id: int) -> LayerPlan:
        """The plan of layer `layer_id` (KeyError when the step has no such layer)."""
        for i, p in self.layers:
            if i == layer_id:
                return p
        raise KeyError(f"the step has no indexer layer {layer_id}")

    def __str__(self) -> str:
        first = self.layers[0][1]
        lines = [f"step plan on {first.device} (the layers in the order a step runs them):"]
        for layer_id, p in self.layers:
            lines.append(f"  layer {layer_id}: {p.spec}")
            lines += [f"    {what}: {choice} ({why})" for what, choice, why in p.decisions()]
        return "\n".join(lines)


def plan_step(
    layers: Sequence[tuple[int, LayerSpec]],
    device: Device | None = None,
    *,
    path: Path = "auto",
    implementation: _dispatch.Implementation = None,
    fuse: bool = True,
    topk_algorithm: str | None = None,
) -> StepPlan:
    """The plan of a decode step over `layers` ((layer id, spec) in the order the step runs
    them: the source first where there is one); the rest as in `plan_layer` and
    `TwoLevelIndexer` (`fuse=False`: every layer op by op)."""
    record_ = device if device is not None else device_record()
    unfused = None if fuse else "fuse=False, as asked"
    return StepPlan(
        tuple(
            (
                i,
                plan_layer(
                    s,
                    record_,
                    path=path,
                    implementation=implementation,
                    unfused=unfused,
                    topk_algorithm=topk_algorithm,
                ),
            )
            for i, s in layers
        )
    )
