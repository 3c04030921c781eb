"""The indexer step of a whole model: every indexer layer of one decode (or prefill) step.

V4.1 has one candidate source layer (20) that publishes a CandidateTable, consumer layers
(24/28/32/36) that select inside it, and may have plain indexer layers that select over their
whole context on their own. `make_two_level_indexer` builds the description once from the model
configuration; `TwoLevelIndexer.decode` / `.prefill` run one step over all of those layers in
one traceable function (no state, no streams: the consumers read the table `publish` returned,
so XLA orders them after it and may overlap everything else).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, overload

import jax
import jax.numpy as jnp

from dsv41_jax import _checks, _ext, fused
from dsv41_jax._dispatch import Implementation, shared
from dsv41_jax._ext import DeviceFacts
from dsv41_jax.config import IndexerConfig
from dsv41_jax.indexer import (
    _check_paged_config,
    _dense_select,
    _publish,
    _run_fused,
    _select,
    publish_prefill,
    select_plain_prefill,
    select_prefill,
)
from dsv41_jax.plan import Device, check_algorithm, device_record
from dsv41_jax.plan.layers import (
    PATHS,
    LayerSpec,
    Path,
    Role,
    StepMode,
    StepPlan,
    check_step_mode,
    plan_step,
)
from dsv41_jax.rows import row_block_table
from dsv41_jax.topk import logical_to_physical
from dsv41_jax.types import (
    CandidateTable,
    KeyBuffer,
    PagedIndexCache,
    QueryBundle,
    register_output_pytree,
)

_static = dict(static=True)


@register_output_pytree
@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one step returns.

    Attributes:
      selections: layer id -> int32 `[rows, k]` logical positions (ascending, -1 padded), for the
        source, every consumer and every plain layer.
      table: the source layer's CandidateTable (what the consumers read); None for a model
        without a candidate source layer (plain indexer layers only).
      physical: layer id -> int32 `[rows, k]` cache slots (`logical_to_physical` through the
        row's page table, -1 for padding), or None when not asked for (and for prefill).
    """

    selections: dict[int, jax.Array]
    table: CandidateTable | None
    physical: dict[int, jax.Array] | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TwoLevelIndexer:
    """Which layers publish, consume or select on their own, and how (all static: a pytree with
    no leaves, so it passes through `jax.jit` as an argument or a closure).

    Attributes:
      config: the IndexerConfig shared by every indexer layer.
      source_layer: the candidate source layer id (V4.1: 20), or None for a model whose indexer
        layers all select on their own (then there are no consumer layers).
      consumer_layers: layers that select inside the source layer's table (V4.1: 24, 28, 32, 36).
      plain_layers: indexer layers that select over their whole context without the table.
      path: the consumers' `select` path ("auto": sparse where the GPU has a sparse kernel).
      implementation: None, or a preference order shared by every op (a single name is stored
        as a one-name order); each op skips the names it lacks and runs its own order when it has
        none of them (e.g. ("pallas",) runs the Pallas top-k and the FFI logits).
      topk_algorithm: the CUDA select every layer runs wherever it takes the call (as in
        `dsv41_jax.topk`); None: the plan's (`dsv41_jax.plan`).
      step_mode: how a decode step runs where its layers can run fused (`dsv41_jax.fused`):
        "graphs" (the default: one custom call replaying a cached CUDA graph), "direct",
        "traced", "layers" (one custom call a layer) or "ops" (op by op); results are
        identical in every mode (for benchmarks and tests).
    """

    config: IndexerConfig = dataclasses.field(metadata=_static)
    source_layer: int | None = dataclasses.field(metadata=_static)
    consumer_layers: tuple[int, ...] = dataclasses.field(metadata=_static)
    plain_layers: tuple[int, ...] = dataclasses.field(default=(), metadata=_static)
    path: Path = dataclasses.field(default="auto", metadata=_static)
    implementation: Implementation = dataclasses.field(default=None, metadata=_static)
    topk_algorithm: str | None = dataclasses.field(default=None, metadata=_static)
    step_mode: StepMode = dataclasses.field(default="graphs", metadata=_static)

    @property
    def layers(self) -> tuple[int, ...]:
        """Every indexer layer this step runs, sorted."""
        return tuple(sorted(self._call_order))

    @property
    def _call_order(self) -> tuple[int, ...]:
        """The layers in the order one step runs them: the source, consumers, plain layers."""
        source = () if self.source_layer is None else (self.source_layer,)
        return (*source, *self.consumer_layers, *self.plain_layers)

    def _inputs(self, queries: Mapping[int, Any], keys: Mapping[int, Any], what: str) -> None:
        for name, m in (("queries", queries), (what, keys)):
            if not isinstance(m, Mapping):
                raise ValueError(f"{name} must map layer id -> value, got {type(m).__name__}")
            missing = [layer for layer in self.layers if layer not in m]
            if missing:
                raise ValueError(f"{name} has no entry for indexer layers {missing}")

    def decode(
        self,
        queries: Mapping[int, QueryBundle],
        caches: Mapping[int, PagedIndexCache],
        context_lens: jax.Array,
        block_table: jax.Array,
        *,
        physical: bool = False,
    ) -> StepResult:
        """One decode step over every indexer layer.

        Args:
          queries: layer id -> that layer's QueryBundle `[batch, next_n, H, D]`.
          caches: layer id -> that layer's paged index cache (all share `block_table`).
          context_lens: int `[batch]`; block_table: int `[batch, max_pages]`.
          physical: also return every selection as cache slots.
        """
        self._inputs(queries, caches, "caches")
        physical = _checks.boolean(physical, "physical")
        context_lens = _checks.array(context_lens, "context_lens")
        block_table = _checks.array(block_table, "block_table")
        sp = self.plan(queries, caches, block_table)
        cfg, impl = self.config, self.implementation
        table: CandidateTable | None
        if sp.one_call:
            out, table = self._one_call(sp, queries, caches, context_lens, block_table)
            selections = dict(zip(self._call_order, out, strict=True))
        else:
            selections, table = self._layer_by_layer(sp, queries, caches, context_lens, block_table)
        slots = None
        if physical:
            bt = row_block_table(block_table, cfg.next_n)
            slots = {
                layer: logical_to_physical(sel, bt, cfg.page_size, implementation=impl)
                for layer, sel in selections.items()
            }
        return StepResult(selections, table, slots)

    def decode_stacked(
        self,
        queries: Mapping[int, QueryBundle],
        caches: Mapping[int, PagedIndexCache],
        context_lens: jax.Array,
        block_table: jax.Array,
    ) -> jax.Array:
        """`decode`'s selections as one int32 array `[len(self.layers), rows, k]`, layer
        `self.layers[i]` at index i, and nothing else (no table).

        For a step jitted on its own and called back to back: each array a jitted function
        returns costs the host several µs a call (about 6 on the H200's host, BENCHMARKS.md),
        so one array instead of `decode`'s nine (five selections, four table arrays) is that
        much less host work a step. On an SM90 GPU every layer's selection is written in place
        into the one array by the step's single custom call; elsewhere they are stacked."""
        self._inputs(queries, caches, "caches")
        context_lens = _checks.array(context_lens, "context_lens")
        block_table = _checks.array(block_table, "block_table")
        sp = self.plan(queries, caches, block_table)
        if sp.one_call:
            (stacked,), _ = self._one_call(
                sp, queries, caches, context_lens, block_table, stacked=True
            )
            return stacked
        selections, _ = self._layer_by_layer(sp, queries, caches, context_lens, block_table)
        return jnp.stack([selections[layer] for layer in self.layers])

    def plan(
        self,
        queries: Mapping[int, Any],
        caches: Mapping[int, Any],
        block_table: Any,
        *,
        device: DeviceFacts | Device | None = None,
    ) -> StepPlan:
        """The decisions of a decode step over these inputs, each with its reason (nothing is
        traced or run: arrays or `jax.ShapeDtypeStruct`s, of which only the shapes are read):
        every layer's route and whether it runs fused, and whether the whole step is one
        custom call (`dsv41_jax.plan.StepPlan`, printable). `device`: a `DeviceFacts` (e.g.
        `dsv41_jax.info.H200`) or a `dsv41_jax.plan.Device` to plan for; None: the device the
        ops trace for. `decode` runs exactly this plan.

        Raises:
          ValueError: inputs that do not match the config, or a block table not `[batch,
            max_pages]`; `path="sparse"` on a GPU without a sparse kernel for the inputs.
        """
        self._inputs(queries, caches, "caches")
        if len(getattr(block_table, "shape", ())) != 2:
            raise ValueError(f"block_table must be [batch, max_pages], got {block_table!r}")
        for layer in self._call_order:
            _check_paged_config(self.config, queries[layer], caches[layer])
        record_ = device if isinstance(device, Device) else device_record(device)
        source: list[Role] = ["source"] if self.source_layer is not None else []
        consumers: list[Role] = ["consumer"] * len(self.consumer_layers)
        roles = source + consumers + ["plain"] * len(self.plain_layers)
        specs = [
            (i, LayerSpec.of(r, queries[i], caches[i], block_table, self.config, r == "consumer"))
            for i, r in zip(self._call_order, roles, strict=True)
        ]
        return plan_step(
            specs,
            record_,
            path=self.path,
            implementation=self.implementation,
            step_mode=self.step_mode,
            topk_algorithm=self.topk_algorithm,
        )

    def _layer_by_layer(
        self,
        sp: StepPlan,
        queries: Mapping[int, QueryBundle],
        caches: Mapping[int, PagedIndexCache],
        context_lens: jax.Array,
        block_table: jax.Array,
    ) -> tuple[dict[int, jax.Array], CandidateTable | None]:
        """The step's layers one after another, each as its plan says. The lengths, DeepGEMM's
        schedule and the sparse rows' lengths are computed once for every layer that runs
        fused (where the first does; what no layer reads, e.g. the sparse share when every
        consumer is dense, is dropped at lowering)."""
        sp.record()
        cfg, forced, src = self.config, self.topk_algorithm, self.source_layer
        first = self._call_order[0]
        share = sparse_share = None
        if sp.shared:
            share = fused.Shared.of(context_lens, block_table, caches[first], queries[first].next_n)
        selections: dict[int, jax.Array] = {}
        table = None
        if src is not None:
            selections[src], table = _publish(
                queries[src],
                caches[src],
                context_lens,
                block_table,
                cfg,
                sp.layer(src),
                forced,
                share,
            )
            if share is not None and self.consumer_layers:
                sparse_share = fused.SparseShared.of(table)
        for layer in self.consumer_layers:  # the table is this step's own
            assert table is not None  # consumer layers imply a source layer (checked at build)
            selections[layer] = _select(
                queries[layer],
                caches[layer],
                context_lens,
                block_table,
                table,
                cfg,
                sp.layer(layer),
                forced,
                share=share,
                sparse_share=sparse_share,
            )
        for layer in self.plain_layers:
            selections[layer] = _dense_select(
                queries[layer],
                caches[layer],
                context_lens,
                block_table,
                cfg.index_topk,
                sp.layer(layer),
                forced,
                share,
            )
        return selections, table

    def _one_call(
        self,
        sp: StepPlan,
        queries: Mapping[int, QueryBundle],
        caches: Mapping[int, PagedIndexCache],
        context_lens: jax.Array,
        block_table: jax.Array,
        stacked: bool = False,
    ) -> tuple[list[jax.Array], CandidateTable]:
        """Every layer as one custom call (`fused.decode_step`), as the plan `sp` says: the
        layers' selections in `_call_order` (with `stacked`, one `[layers, rows, k]` array in
        `self.layers` order) and the table."""
        layers = self._call_order
        for layer, lp in sp.layers:
            _run_fused(lp, queries[layer], caches[layer], context_lens, block_table)
        sp.record()
        roles: list[fused.Role] = [
            "source" if lp.spec.role == "source" else lp.route for _, lp in sp.layers
        ]
        qs, cs = [queries[x] for x in layers], [caches[x] for x in layers]
        slots = [self.layers.index(x) for x in layers] if stacked else None
        return fused.decode_step(
            qs,
            cs,
            roles,
            context_lens,
            block_table,
            self.config,
            sp.layers[0][1].every_block,
            [lp.top_select for _, lp in sp.layers],
            sp.layers[0][1].blocks_select,
            slots,
            self.step_mode,
        )

    def prefill(
        self,
        queries: Mapping[int, QueryBundle],
        keys: Mapping[int, KeyBuffer],
        starts: jax.Array,
        ends: jax.Array,
        *,
        row_chunk: int | None = None,
    ) -> StepResult:
        """One ragged prefill step: row `i` of every layer sees packed keys `[starts[i],
        ends[i])`; positions relative to `starts[i]` (the consumers use the mask path).
        `row_chunk`: score and select that many query rows at a time (each layer's `[rows, T]`
        float32 logits otherwise; 64 GiB at 128K tokens); same result."""
        self._inputs(queries, keys, "keys")
        cfg, impl, forced = self.config, self.implementation, self.topk_algorithm
        src, table, selections = self.source_layer, None, {}
        if src is not None:
            selections[src], table = publish_prefill(
                queries[src],
                keys[src],
                starts,
                ends,
                cfg,
                row_chunk=row_chunk,
                implementation=impl,
                topk_algorithm=forced,
            )
        for layer in self.consumer_layers:
            assert table is not None  # consumer layers imply a source layer (checked at build)
            selections[layer] = select_prefill(
                queries[layer],
                keys[layer],
                starts,
                ends,
                table,
                cfg,
                row_chunk=row_chunk,
                implementation=impl,
                topk_algorithm=forced,
            )
        for layer in self.plain_layers:
            selections[layer] = select_plain_prefill(
                queries[layer],
                keys[layer],
                starts,
                ends,
                cfg,
                row_chunk=row_chunk,
                implementation=impl,
                topk_algorithm=forced,
            )
        return StepResult(selections, table, None)


@overload
def make_two_level_indexer(
    config: IndexerConfig,
    *,
    source_layer: int,
    consumer_layers: Sequence[int] = (),
    plain_layers: Sequence[int] = (),
    path: Path = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    step_mode: StepMode = "graphs",
) -> TwoLevelIndexer: ...


@overload
def make_two_level_indexer(
    config: IndexerConfig,
    *,
    source_layer: None,
    consumer_layers: Sequence[int] = (),
    plain_layers: Sequence[int] = (),
    path: Path = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    step_mode: StepMode = "graphs",
) -> TwoLevelIndexer | None: ...


def make_two_level_indexer(
    config: IndexerConfig,
    *,
    source_layer: int | None,
    consumer_layers: Sequence[int] = (),
    plain_layers: Sequence[int] = (),
    path: Path = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    step_mode: StepMode = "graphs",
) -> TwoLevelIndexer | None:
    """The step of a model's indexer layers, or None for a model with no indexer layer at all.

    V4.1: `make_two_level_indexer(IndexerConfig(), source_layer=20, consumer_layers=(24, 28, 32,
    36))`. A model with plain indexer layers only (no candidate source, e.g. V3.2-style):
    `source_layer=None, plain_layers=(...)`; its steps return no table. Typed accordingly: an
    int `source_layer` returns a TwoLevelIndexer, `source_layer=None` a TwoLevelIndexer or None.
    The other arguments are the TwoLevelIndexer's attributes (`step_mode` included).

    Raises:
      ValueError: a layer listed twice, a non-int layer id, a bad path, implementation,
        topk_algorithm or step_mode.
      ExtensionUnavailable: `implementation="ffi"` (exactly) on a platform where the FFI kernels
        cannot run (no extension, or not a CUDA GPU).
    """
    if not isinstance(config, IndexerConfig):
        raise ValueError(f"config must be an IndexerConfig, got {type(config).__name__}")
    if source_layer is None:
        if consumer_layers:
            raise ValueError("consumer_layers need a source_layer to publish their candidates")
        if not plain_layers:
            return None
    ids = [] if source_layer is None else [_checks.static_int(source_layer, "source_layer")]
    ids += [_checks.static_int(x, "consumer_layers") for x in consumer_layers]
    ids += [_checks.static_int(x, "plain_layers") for x in plain_layers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"a layer appears twice among source, consumer and plain layers: {ids}")
    if path not in PATHS:
        raise ValueError(f"path must be 'auto', 'mask' or 'sparse', got {path!r}")
    if implementation == "ffi":
        _ext.require_gpu("make_two_level_indexer(implementation='ffi')")
    implementation = shared(implementation)
    topk_algorithm = check_algorithm(topk_algorithm)
    step_mode = check_step_mode(step_mode)
    first, n_consumers = (0 if source_layer is None else 1), len(consumer_layers)
    return TwoLevelIndexer(
        config,
        None if source_layer is None else ids[0],
        tuple(ids[first : first + n_consumers]),
        tuple(ids[first + n_consumers :]),
        path,
        implementation,
        topk_algorithm,
        step_mode,
    )
