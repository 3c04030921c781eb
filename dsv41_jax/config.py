"""The indexer's static configuration."""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import numpy as np

CacheFormat = Literal["fp8", "mxfp4"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class IndexerConfig:
    """Static shape and selection parameters of one V4.1 indexer.

    Defaults are DeepSeek-V4.1's (docs/contract.md). Every field is static (a pytree with no
    leaves), so a config can be passed straight into `jax.jit`-ed functions. NumPy integers are
    accepted and stored as Python ints.

    Attributes:
      num_heads: index heads per query row.
      head_dim: index head dimension D (the rotary part is `rope_head_dim` of it).
      rope_head_dim: rotary dimensions inside `head_dim` (informational; the indexer never
        applies RoPE itself).
      index_topk: k of every layer's top-k selection.
      candidate_topk_blocks: C, the number of candidate blocks the source layer publishes.
      candidate_block_size: B, positions per candidate block.
      page_size: positions per page of the paged index cache.
      cache_format: "fp8" (DeepGEMM SM90 layout) or "mxfp4" (V4.1 native, SM100).
      next_n: query rows per request (> 1 for speculative verify rows).
    """

    num_heads: int = dataclasses.field(default=32, metadata=dict(static=True))
    head_dim: int = dataclasses.field(default=128, metadata=dict(static=True))
    rope_head_dim: int = dataclasses.field(default=64, metadata=dict(static=True))
    index_topk: int = dataclasses.field(default=512, metadata=dict(static=True))
    candidate_topk_blocks: int = dataclasses.field(default=2048, metadata=dict(static=True))
    candidate_block_size: int = dataclasses.field(default=8, metadata=dict(static=True))
    page_size: int = dataclasses.field(default=64, metadata=dict(static=True))
    cache_format: CacheFormat = dataclasses.field(default="fp8", metadata=dict(static=True))
    next_n: int = dataclasses.field(default=1, metadata=dict(static=True))

    def __post_init__(self) -> None:
        for name in (
            "num_heads",
            "head_dim",
            "index_topk",
            "candidate_topk_blocks",
            "candidate_block_size",
            "page_size",
            "next_n",
        ):
            value = getattr(self, name)
            if isinstance(value, jax.core.Tracer):
                raise ValueError(
                    f"IndexerConfig.{name} must be a static int known at trace time, got a traced "
                    "value: build the config outside jit, or pass it as a static argument (mark "
                    "it static, e.g. jax.jit(..., static_argnames='config'))"
                )
            if isinstance(value, np.integer):  # NumPy ints are ints (stored as Python ints)
                value = int(value)
                object.__setattr__(self, name, value)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"IndexerConfig.{name} must be a positive int, got {value!r}")
        if isinstance(self.rope_head_dim, np.integer):
            object.__setattr__(self, "rope_head_dim", int(self.rope_head_dim))
        if not isinstance(self.rope_head_dim, int) or not 0 <= self.rope_head_dim <= self.head_dim:
            raise ValueError(
                f"IndexerConfig.rope_head_dim must be an int in [0, head_dim={self.head_dim}], "
                f"got {self.rope_head_dim!r}"
            )
        if self.cache_format not in ("fp8", "mxfp4"):
            raise ValueError(
                f"IndexerConfig.cache_format must be 'fp8' or 'mxfp4', got {self.cache_format!r}"
            )
        if self.cache_format == "mxfp4" and (self.head_dim % 32 or self.head_dim > 128):
            raise ValueError(
                "IndexerConfig.head_dim must be a multiple of 32 and at most 128 for the mxfp4 "
                f"cache (one int32 of ue8m0 exponents per token), got {self.head_dim}"
            )
        if self.page_size % self.candidate_block_size:
            raise ValueError(
                f"IndexerConfig.page_size ({self.page_size}) must be a multiple of "
                f"candidate_block_size ({self.candidate_block_size}): candidate blocks are "
                "published as physical slots of one page"
            )

    @property
    def candidate_positions(self) -> int:
        """Positions covered by the published table (C·B): a no-op candidate path up to it."""
        return self.candidate_topk_blocks * self.candidate_block_size
