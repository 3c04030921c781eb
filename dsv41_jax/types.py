"""The indexer's state as explicit pytrees: caches, query bundles, the published candidate table."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dsv41_jax import _checks
from dsv41_jax.config import CacheFormat

INT32_MAX = 2**31 - 1  # padding of CandidateTable.blocks (sorts after every block id)

_static = dict(static=True)


def _check_not_a_list(x: object, name: str) -> None:
    # Lists and Python numbers are user mistakes; other leaves (arrays, tracers, the placeholders
    # of pytree transformations) pass.
    if isinstance(x, (list, tuple, int, float)):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}")


def register_output_pytree[T](cls: type[T]) -> type[T]:
    """Register a frozen dataclass (fields with `metadata=_static` are static) as a pytree
    whose unflatten skips `__init__` and its checks. A jitted step rebuilds the objects it
    returns on every call, on the host's critical path, where skipping the constructor and its
    checks makes them far cheaper to build (BENCHMARKS_HISTORY.md, where the host time goes);
    unflatten also sees placeholder leaves, which the checks would refuse. Flatten stays as
    `register_dataclass` would do it."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # a dataclass by contract
    data = tuple(f.name for f in fields if not f.metadata.get("static"))
    meta = tuple(f.name for f in fields if f.metadata.get("static"))
    keys = tuple(jax.tree_util.GetAttrKey(n) for n in data)

    def flatten_with_keys(obj: T) -> tuple[list[tuple[Any, Any]], tuple[Any, ...]]:
        return [(k, getattr(obj, n)) for k, n in zip(keys, data)], tuple(
            getattr(obj, n) for n in meta
        )

    def flatten(obj: T) -> tuple[list[Any], tuple[Any, ...]]:
        return [getattr(obj, n) for n in data], tuple(getattr(obj, n) for n in meta)

    def unflatten(aux: tuple[Any, ...], children: Any) -> T:
        obj = object.__new__(cls)
        obj.__dict__.update(zip(data, children))
        obj.__dict__.update(zip(meta, aux))
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls


def _check_one_layer(x: Any, ndim: int, name: str, what: str, plural: str) -> None:
    """A layer's array has `ndim` dimensions; more are a model's stacked layers (docs/models.md),
    which the ops do not take: say so rather than fail on a shape deep inside an op."""
    got = getattr(x, "ndim", ndim)
    if got > ndim:
        raise ValueError(
            f"{name} has leading dimensions {tuple(x.shape[: got - ndim])} (a stacked {what}): "
            f"pass one layer's, e.g. jax.tree.map(lambda x: x[i], {plural}), or lax.scan over "
            "the leading axis"
        )


def row_bytes(fmt: str, head_dim: int) -> int:
    """Bytes of one cache position: the fp8 key and its float32 scale, or the packed mxfp4 key
    and its four ue8m0 exponents."""
    return head_dim + 4 if fmt == "fp8" else head_dim // 2 + 4


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PagedIndexCache:
    """A paged index-K cache in DeepGEMM's page layout.

    `data` is uint8 `[num_pages, page_size, 1, row_bytes]`, but each page is one flat run of
    bytes, not interleaved per token (leading dimensions are allowed, e.g. a model's layers
    stacked for `lax.scan`: the ops take one layer's cache):
      - "fp8":   `page_size·D` e4m3 values, then `page_size` fp32 scales (row_bytes = D + 4);
      - "mxfp4": `page_size·D/2` packed e2m1 bytes (low nibble = even element), then `page_size`
        int32 words of four ue8m0 exponents, one per 32 elements (row_bytes = D/2 + 4).
    A token at slot `s` lives on page `s // page_size` at offset `s % page_size`.
    """

    data: jax.Array
    format: CacheFormat = dataclasses.field(default="fp8", metadata=_static)

    def __post_init__(self) -> None:
        if self.format not in ("fp8", "mxfp4"):
            raise ValueError(
                f"PagedIndexCache.format must be 'fp8' or 'mxfp4', got {self.format!r}"
            )
        _check_not_a_list(self.data, "PagedIndexCache.data")
        shape = getattr(self.data, "shape", None)
        dtype = getattr(self.data, "dtype", None)
        if shape is None or dtype is None:
            return  # pytree plumbing (e.g. tree_map placeholders): nothing to check
        if len(shape) < 4 or shape[-2] != 1 or dtype != jnp.uint8:
            raise ValueError(
                "PagedIndexCache.data must be uint8 [num_pages, page_size, 1, row_bytes] (with "
                f"any leading dimensions), got {dtype} {tuple(shape)}"
            )
        row = shape[-1]
        bad_mx = self.format == "mxfp4" and ((row - 4) % 16 or row - 4 > 64)
        if row <= 4 or bad_mx:
            raise ValueError(
                f"PagedIndexCache.data last dim {row} is not a valid {self.format} row "
                "(D + 4 for fp8; D/2 + 4 with D % 32 == 0 and D <= 128 for mxfp4)"
            )

    def check_one_layer(self, name: str) -> None:
        """ValueError naming `name` for a cache with leading (stacked) dimensions: the ops read
        one layer's cache (index it, or `lax.scan` over the leading axis)."""
        _check_one_layer(self.data, 4, name, "cache", "caches")

    @property
    def num_pages(self) -> int:
        return self.data.shape[-4]

    @property
    def page_size(self) -> int:
        return self.data.shape[-3]

    @property
    def head_dim(self) -> int:
        row = self.data.shape[-1] - 4
        return row if self.format == "fp8" else 2 * row

    @property
    def capacity(self) -> int:
        """Token slots in the cache."""
        return self.num_pages * self.page_size

    @staticmethod
    def zeros(
        num_pages: int, page_size: int, head_dim: int, format: CacheFormat = "fp8"
    ) -> PagedIndexCache:
        """An empty cache (all bytes zero: values 0, scales 0).

        Raises ValueError naming the argument for a non-positive or non-integer size, or a
        head_dim the format cannot hold (mxfp4: a multiple of 32, at most 128).
        """
        num_pages = _checks.positive_int(num_pages, "num_pages")
        page_size = _checks.positive_int(page_size, "page_size")
        head_dim = _checks.positive_int(head_dim, "head_dim")
        if format not in ("fp8", "mxfp4"):
            raise ValueError(f"format must be 'fp8' or 'mxfp4', got {format!r}")
        if format == "mxfp4" and (head_dim % 32 or head_dim > 128):
            raise ValueError(
                f"head_dim must be a multiple of 32, at most 128, for mxfp4: {head_dim}"
            )
        shape = (num_pages, page_size, 1, row_bytes(format, head_dim))
        return PagedIndexCache(jnp.zeros(shape, jnp.uint8), format)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KeyBuffer:
    """Packed (non-paged) quantized keys of a ragged prefill batch.

    - "fp8":   `values` float8_e4m3fn `[T, D]`, `scales` float32 `[T]` (per-token scale);
    - "mxfp4": `values` uint8 `[T, D/2]` packed e2m1, `scales` uint8 `[T, D/32]` ue8m0 exponents.
    """

    values: jax.Array
    scales: jax.Array
    format: CacheFormat = dataclasses.field(default="fp8", metadata=_static)

    def __post_init__(self) -> None:
        if self.format not in ("fp8", "mxfp4"):
            raise ValueError(f"KeyBuffer.format must be 'fp8' or 'mxfp4', got {self.format!r}")
        _check_not_a_list(self.values, "KeyBuffer.values")
        _check_not_a_list(self.scales, "KeyBuffer.scales")
        v, sc = (getattr(x, "shape", None) for x in (self.values, self.scales))
        if v is None or sc is None or not hasattr(self.values, "dtype"):
            return  # pytree plumbing: nothing to check
        fp8 = self.format == "fp8"
        want = tuple(
            jnp.dtype(w) for w in ((jnp.float8_e4m3fn, jnp.float32) if fp8 else (jnp.uint8,) * 2)
        )
        got = (jnp.dtype(self.values.dtype), jnp.dtype(self.scales.dtype))
        if len(v) < 2 or got != want:
            raise ValueError(
                f"KeyBuffer ({self.format}) needs values {want[0].name} [T, "
                f"{'D' if fp8 else 'D/2'}] and scales {want[1].name}, got values "
                f"{got[0]} {tuple(v)} and scales {got[1]} (quantize keys with "
                "dsv41_jax.quantize_keys)"
            )
        want_scales = tuple(v[:-1]) if fp8 else (*v[:-1], 2 * v[-1] // 32)
        if tuple(sc) != want_scales:
            raise ValueError(
                f"KeyBuffer.scales must have shape {want_scales} for values {tuple(v)} "
                f"({self.format}), got {tuple(sc)}"
            )

    def check_one_layer(self, name: str) -> None:
        """ValueError naming `name` for a buffer with leading (stacked) dimensions."""
        _check_one_layer(self.values, 2, name, "key buffer", "keys")

    @property
    def num_tokens(self) -> int:
        return self.values.shape[-2]

    @property
    def head_dim(self) -> int:
        d = self.values.shape[-1]
        return d if self.format == "fp8" else 2 * d


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QueryBundle:
    """One layer's quantized index queries (the seeds' IndexerInputs).

    Rows are `[batch, next_n]`; row `j` of a request with length `L` sees `L - next_n + 1 + j`
    positions.
      - "fp8":   `values` float8_e4m3fn `[batch, next_n, H, D]`; `scales` is None (the per-row
        query scale is folded into `weights`).
      - "mxfp4": `values` uint8 `[batch, next_n, H, D/2]` packed e2m1; `scales` uint8
        `[batch, next_n, H, D/32]` ue8m0 exponents, applied per 32 elements inside the dot.
    `weights` float32 `[batch, next_n, H]` are the per-head weights (head and softmax scales
    folded in).
    """

    values: jax.Array
    weights: jax.Array
    scales: jax.Array | None = None
    format: CacheFormat = dataclasses.field(default="fp8", metadata=_static)

    def check_one_layer(self, name: str) -> None:
        """ValueError naming `name` for a bundle with leading (stacked) dimensions."""
        _check_one_layer(self.values, 4, name, "query bundle", "queries")

    @property
    def batch(self) -> int:
        return self.values.shape[0]

    @property
    def next_n(self) -> int:
        return self.values.shape[1]

    @property
    def num_rows(self) -> int:
        return self.values.shape[0] * self.values.shape[1]

    @property
    def num_heads(self) -> int:
        return self.values.shape[2]

    @property
    def head_dim(self) -> int:
        d = self.values.shape[3]
        return d if self.format == "fp8" else 2 * d


@register_output_pytree
@dataclasses.dataclass(frozen=True)
class CandidateTable:
    """What the candidate source layer publishes for the consumer layers, per query row.

    Attributes:
      blocks: int32 `[rows, C]` logical block ids, ascending, padded with INT32_MAX.
      count: int32 `[rows]`, the number of real blocks, `min(C, ceil(len / B))`.
      valid_lens: int32 `[rows]`, the sparse row length `B·(count - 1) + ((len - 1) mod B) + 1`
        (0 when len = 0): sparse column `j` is position `blocks[j // B]·B + j % B`.
      physical: int32 `[rows, C]`, the same blocks as cache slots of size B through the page
        table (`physical slot // B`), padded with -1.
      block_size: B, the block size the table was published with (static). Every consumer
        checks its own B against it: a table read with another B would name other positions.
    """

    blocks: jax.Array
    count: jax.Array
    valid_lens: jax.Array
    physical: jax.Array
    block_size: int = dataclasses.field(metadata=_static, kw_only=True)

    def __post_init__(self) -> None:
        b = self.block_size
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise ValueError(f"CandidateTable.block_size must be a positive int, got {b!r}")

    def check_block_size(self, block_size: int, name: str) -> None:
        """ValueError naming both sizes unless `block_size` is the table's own."""
        if block_size != self.block_size:
            raise ValueError(
                f"{name} is {block_size} but the CandidateTable was published with block_size "
                f"{self.block_size}: a consumer must use the publisher's block size"
            )

    def check_arrays(self, rows: int | None, name: str = "table") -> None:
        """ValueError naming `name.field` unless blocks and physical are integer `[rows, C]`
        and count and valid_lens integer `[rows]` (`rows` None: any number of rows)."""
        for field in ("blocks", "count", "valid_lens", "physical"):
            x = getattr(self, field)
            if not hasattr(x, "dtype") or not hasattr(x, "shape"):
                raise ValueError(f"{name}.{field} must be an array, got {type(x).__name__}")
            _checks.integer(x, f"{name}.{field}")
        _checks.rank(self.blocks, 2, f"{name}.blocks")
        r = self.blocks.shape[0] if rows is None else rows
        _checks.shape(self.blocks, (r, None), f"{name}.blocks")
        _checks.shape(self.physical, self.blocks.shape, f"{name}.physical")
        for field in ("count", "valid_lens"):
            _checks.shape(getattr(self, field), (r,), f"{name}.{field}")

    @property
    def num_rows(self) -> int:
        return self.blocks.shape[0]

    @property
    def num_candidates(self) -> int:
        return self.blocks.shape[1]
