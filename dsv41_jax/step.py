"""The indexer step of a whole model: every indexer layer of one decode (or prefill) step.

V4.1 has one candidate source layer (20) that publishes a CandidateTable, consumer layers
(24/28/32/36) that select inside it, and may have plain indexer layers that select over their
whole context on their own. `make_two_level_indexer` builds the description once from the model
configuration. A model's jitted decode step calls it one layer at a time
(`TwoLevelIndexer.begin_decode`, then `decode_layer` at each indexer layer, a pytree state
carrying the source's table and what the layers share); `decode` / `prefill` run every layer
of a step over inputs all at hand. No streams, no hidden state: the consumers read the table
the source returned, so XLA orders them after it and may overlap everything else.
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
    StepPlan,
    plan_step,
)
from dsv41_jax.rows import row_block_table
from dsv41_jax.topk.api import logical_to_physical
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
class DecodeState:
    """What the indexer layers of one decode step hand on, layer to layer
    (`TwoLevelIndexer.begin_decode`, then `decode_layer` at each indexer layer). A pytree: it
    crosses `jax.jit`, `lax.scan` and `shard_map` like the arrays it holds.

    Attributes:
      context_lens: int32 `[batch]` request lengths; block_table: int32 `[batch, max_pages]`
        (as given to `begin_decode`, checked).
      table: the CandidateTable the source layer published in this step (None before it ran);
        the consumers select inside it, published from these very lengths and page table.
      shared: the lengths clamped to the page table and DeepGEMM's schedule, computed by the
        step's first fused layer for every other (None until then, and off SM90 GPUs).
      sparse_shared: the table's sparse row lengths, for the sparse consumers (the same).
    """

    context_lens: jax.Array
    block_table: jax.Array
    table: CandidateTable | None = None
    shared: fused.Shared | None = None
    sparse_shared: fused.SparseShared | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TwoLevelIndexer:
    """Which layers publish, consume or select on their own, and how (all static: a pytree with
    no leaves, so it passes through `jax.jit` as an argument or a closure).

    A model calls it one layer at a time, inside its own jitted decode step (layer 24's
    queries come from layer 23's output): `state = ix.begin_decode(context_lens,
    block_table)` once a step, then `selection, state = ix.decode_layer(layer, query, cache,
    state)` at each indexer layer, the source before its consumers. `decode` runs every layer
    that way at once, for inputs that are all at hand (tests, notebooks, benchmarks).

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
      fuse: False runs every layer op by op even where it could run as one custom call
        (`dsv41_jax.fused`); the results are identical (for benchmarks and tests).
    """

    config: IndexerConfig = dataclasses.field(metadata=_static)
    source_layer: int | None = dataclasses.field(metadata=_static)
    consumer_layers: tuple[int, ...] = dataclasses.field(metadata=_static)
    plain_layers: tuple[int, ...] = dataclasses.field(default=(), metadata=_static)
    path: Path = dataclasses.field(default="auto", metadata=_static)
    implementation: Implementation = dataclasses.field(default=None, metadata=_static)
    topk_algorithm: str | None = dataclasses.field(default=None, metadata=_static)
    fuse: bool = dataclasses.field(default=True, metadata=_static)

    def __post_init__(self) -> None:
        # The factory's checks (a direct construction too), each field stored normalised.
        if not isinstance(self.config, IndexerConfig):
            raise ValueError(f"config must be an IndexerConfig, got {type(self.config).__name__}")
        ids = _checks.layer_ids(self.source_layer, self.consumer_layers, self.plain_layers)
        if ids[0] is None and not ids[2]:
            raise ValueError(
                "a TwoLevelIndexer needs a source_layer or plain_layers (make_two_level_indexer "
                "returns None for a model without indexer layers)"
            )
        if self.path not in PATHS:
            raise ValueError(f"path must be 'auto', 'mask' or 'sparse', got {self.path!r}")
        if self.implementation == "ffi":
            _ext.require_gpu("TwoLevelIndexer(implementation='ffi')")
        for name, value in (
            *zip(("source_layer", "consumer_layers", "plain_layers"), ids),
            ("implementation", shared(self.implementation)),
            ("topk_algorithm", check_algorithm(self.topk_algorithm)),
            ("fuse", _checks.boolean(self.fuse, "fuse")),
        ):
            object.__setattr__(self, name, value)

    @property
    def layers(self) -> tuple[int, ...]:
        """Every indexer layer this step runs, sorted."""
        return tuple(sorted(self._call_order))

    @property
    def _call_order(self) -> tuple[int, ...]:
        """The layers in the order one step runs them: the source, consumers, plain layers."""
        source = () if self.source_layer is None else (self.source_layer,)
        return (*source, *self.consumer_layers, *self.plain_layers)

    def _role(self, layer: object) -> Role:
        if layer == self.source_layer:
            return "source"
        if layer in self.consumer_layers:
            return "consumer"
        if layer in self.plain_layers:
            return "plain"
        raise ValueError(f"layer {layer!r} is not one of this indexer's layers {self.layers}")

    def _inputs(self, queries: Mapping[int, Any], keys: Mapping[int, Any], what: str) -> None:
        for name, m in (("queries", queries), (what, keys)):
            if not isinstance(m, Mapping):
                raise ValueError(f"{name} must map layer id -> value, got {type(m).__name__}")
            missing = [layer for layer in self.layers if layer not in m]
            if missing:
                raise ValueError(f"{name} has no entry for indexer layers {missing}")

    def begin_decode(self, context_lens: jax.Array, block_table: jax.Array) -> DecodeState:
        """The state a decode step's indexer layers start from: call once a step, before the
        first `decode_layer`.

        Args:
          context_lens: int `[batch]` request lengths (positions in the cache, this step's
            keys written); block_table: int `[batch, max_pages]`, shared by every layer's cache.

        Raises:
          ValueError: arrays that are not int `[batch]` and `[batch, max_pages]`.
        """
        context_lens = _checks.array(context_lens, "context_lens")
        block_table = _checks.array(block_table, "block_table")
        if block_table.ndim != 2:
            raise ValueError(f"block_table must be [batch, max_pages], got {block_table.shape}")
        if context_lens.shape != block_table.shape[:1]:
            raise ValueError(
                f"context_lens must be [batch] = {block_table.shape[:1]} (the block table's "
                f"rows), got {context_lens.shape}"
            )
        return DecodeState(context_lens, block_table)

    def decode_layer(
        self,
        layer: int,
        query: QueryBundle,
        cache: PagedIndexCache,
        state: DecodeState,
    ) -> tuple[jax.Array, DecodeState]:
        """One indexer layer of a decode step, as a model calls it: the source layer publishes
        the step's table (into the returned state), a consumer selects inside it, a plain
        layer over its whole context.

        A consumer reads the table from `state`, which the source published from the same
        lengths and page table: it takes the fastest route the plan has for such a table
        (`TwoLevelIndexer.plan`) and reads the table as is. The lengths and DeepGEMM's schedule
        are computed by the first fused layer and handed on in the state, once a step.

        Args:
          layer: the layer id (the source, a consumer or a plain layer).
          query: the layer's QueryBundle `[batch, next_n, H, D]`; cache: its paged index cache.
          state: from `begin_decode` or the previous `decode_layer` of this step.

        Returns:
          (int32 `[batch·next_n, k]` logical positions, ascending, -1 padded; the state for
          the next layer).

        Raises:
          ValueError: a layer this indexer does not have, inputs that do not match the config,
            a consumer before the source has run in this step, the source twice in one step.
        """
        if not isinstance(state, DecodeState):
            raise ValueError(
                f"state must be a DecodeState (from begin_decode), got {type(state).__name__}"
            )
        role = self._role(layer)
        if role == "consumer" and state.table is None:
            raise ValueError(
                f"layer {layer} is a consumer: run the source layer {self.source_layer} first "
                "in this step (its table is in the state decode_layer returns)"
            )
        if role == "source" and state.table is not None:
            raise ValueError(
                f"the state already holds a table: source layer {layer} runs once a step "
                "(begin_decode starts the next step)"
            )
        _check_paged_config(self.config, query, cache)
        lens, bt = state.context_lens, state.block_table
        lp = self._plan([(layer, self._spec(layer, query, cache, bt))]).layer(layer)
        cfg, forced, share = self.config, self.topk_algorithm, state.shared
        if lp.fused and share is None:
            share = fused.Shared.of(lens, bt, cfg.page_size, query.next_n)
            state = dataclasses.replace(state, shared=share)
        if role == "source":
            selection, table = _publish(query, cache, lens, bt, cfg, lp, forced, share)
            sparse_share = fused.SparseShared.of(table) if share is not None else None
            return selection, dataclasses.replace(state, table=table, sparse_shared=sparse_share)
        if role == "consumer":
            assert state.table is not None  # checked above
            selection = _select(
                query,
                cache,
                lens,
                bt,
                state.table,
                cfg,
                lp,
                forced,
                share=share,
                sparse_share=state.sparse_shared,
            )
            return selection, state
        k = cfg.index_topk
        return _dense_select(query, cache, lens, bt, k, lp, forced, share), state

    def decode(
        self,
        queries: Mapping[int, QueryBundle],
        caches: Mapping[int, PagedIndexCache],
        context_lens: jax.Array,
        block_table: jax.Array,
        *,
        physical: bool = False,
    ) -> StepResult:
        """Every indexer layer of one decode step, for inputs all at hand: `begin_decode`, then
        `decode_layer` for the source, the consumers and the plain layers in turn (the same
        calls and results as a model's step makes them one at a time).

        Args:
          queries: layer id -> that layer's QueryBundle `[batch, next_n, H, D]`.
          caches: layer id -> that layer's paged index cache (all share `block_table`).
          context_lens: int `[batch]`; block_table: int `[batch, max_pages]`.
          physical: also return every selection as cache slots.
        """
        self._inputs(queries, caches, "caches")
        physical = _checks.boolean(physical, "physical")
        state = self.begin_decode(context_lens, block_table)
        selections: dict[int, jax.Array] = {}
        for layer in self._call_order:
            selections[layer], state = self.decode_layer(
                layer, queries[layer], caches[layer], state
            )
        slots = None
        if physical:
            bt = row_block_table(state.block_table, self.config.next_n)
            slots = {
                layer: logical_to_physical(
                    sel, bt, self.config.page_size, implementation=self.implementation
                )
                for layer, sel in selections.items()
            }
        return StepResult(selections, state.table, slots)

    def decode_stacked(
        self,
        queries: Mapping[int, QueryBundle],
        caches: Mapping[int, PagedIndexCache],
        context_lens: jax.Array,
        block_table: jax.Array,
    ) -> jax.Array:
        """`decode`'s selections as one int32 array `[len(self.layers), rows, k]`, layer
        `self.layers[i]` at index i, and nothing else (no table)."""
        selections = self.decode(queries, caches, context_lens, block_table).selections
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
        every layer's route and whether it runs fused (`dsv41_jax.plan.StepPlan`, printable).
        `device`: a `DeviceFacts` (e.g. `dsv41_jax.info.H200`) or a `dsv41_jax.plan.Device` to
        plan for; None: the device the ops trace for. `decode_layer` runs exactly these plans.

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
        specs = [(i, self._spec(i, queries[i], caches[i], block_table)) for i in self._call_order]
        return self._plan(specs, record_)

    def _spec(self, layer: int, query: Any, cache: Any, block_table: Any) -> LayerSpec:
        """Layer `layer` as its plan sees it: a consumer's table is the one its step published."""
        role = self._role(layer)
        return LayerSpec.of(role, query, cache, block_table, self.config, role == "consumer")

    def _plan(self, specs: list[tuple[int, LayerSpec]], device: Device | None = None) -> StepPlan:
        """The plan of these layers with this indexer's path, implementation, select and fuse."""
        return plan_step(
            specs,
            device,
            path=self.path,
            implementation=self.implementation,
            fuse=self.fuse,
            topk_algorithm=self.topk_algorithm,
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
    fuse: bool = True,
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
    fuse: bool = True,
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
    fuse: bool = True,
) -> TwoLevelIndexer | None:
    """The step of a model's indexer layers, or None for a model with no indexer layer at all.

    V4.1: `make_two_level_indexer(IndexerConfig(), source_layer=20, consumer_layers=(24, 28, 32,
    36))`. A model with plain indexer layers only (no candidate source, e.g. V3.2-style):
    `source_layer=None, plain_layers=(...)`; its steps return no table. Typed accordingly: an
    int `source_layer` returns a TwoLevelIndexer, `source_layer=None` a TwoLevelIndexer or None.
    The other arguments are the TwoLevelIndexer's attributes.

    Raises:
      ValueError: a layer listed twice, a non-int layer id, a bad path, implementation,
        topk_algorithm or fuse.
      ExtensionUnavailable: `implementation="ffi"` (exactly) on a platform where the FFI kernels
        cannot run (no extension, or not a CUDA GPU).
    """
    if not isinstance(config, IndexerConfig):
        raise ValueError(f"config must be an IndexerConfig, got {type(config).__name__}")
    source, consumers, plain = _checks.layer_ids(source_layer, consumer_layers, plain_layers)
    if source is None and not plain:
        return None
    if implementation == "ffi":
        _ext.require_gpu("make_two_level_indexer(implementation='ffi')")
    # The constructor checks and normalises the rest.
    return TwoLevelIndexer(
        config, source, consumers, plain, path, implementation, topk_algorithm, fuse
    )
