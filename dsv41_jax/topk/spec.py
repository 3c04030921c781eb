"""What the plan and the CUDA selects read of a call of the selection ops (`dsv41_jax.plan`
re-exports these names)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp

from dsv41_jax import _checks

Op = Literal["topk", "select_candidate_blocks"]
OPS: tuple[Op, ...] = ("topk", "select_candidate_blocks")


@dataclasses.dataclass(frozen=True)
class Spec:
    """What the plan reads of a call: the op, the scores' `[rows, columns]` and dtype, k (C for
    `select_candidate_blocks`), whether rows have `starts`, the candidate mask's blocks per row
    (None: no mask) and the block size."""

    op: Op
    rows: int
    columns: int
    dtype: str
    k: int
    starts: bool = False
    mask_blocks: int | None = None
    block_size: int = 8

    def __post_init__(self) -> None:
        # A spec built by hand is checked as `Spec.of` builds one (a plan compares them).
        if self.op not in OPS:
            raise ValueError(f"Spec.op must be one of {list(OPS)}, got {self.op!r}")
        for name in ("rows", "columns"):
            _checks.nonnegative_int(getattr(self, name), f"Spec.{name}")
        _checks.positive_int(self.k, "Spec.k")
        _checks.positive_int(self.block_size, "Spec.block_size")
        _checks.boolean(self.starts, "Spec.starts")
        if self.mask_blocks is not None:
            _checks.nonnegative_int(self.mask_blocks, "Spec.mask_blocks")
        try:
            known = isinstance(self.dtype, str) and jnp.dtype(self.dtype).name == self.dtype
        except TypeError:
            known = False
        if not known:
            raise ValueError(
                f"Spec.dtype must be a dtype name such as 'float32', got {self.dtype!r}"
            )

    @classmethod
    def of(
        cls,
        op: Op,
        scores: Any,
        k: int,
        starts: Any = None,
        candidates: Any = None,
        block_size: int = 8,
    ) -> Spec:
        """The spec of a call; `scores` and `candidates` (a mask's `blocks` or CandidateTable)
        may be arrays or `jax.ShapeDtypeStruct`s: only their shapes and dtype are read."""
        if op not in OPS:
            raise ValueError(f"op must be one of {list(OPS)}, got {op!r}")
        blocks = getattr(candidates, "blocks", candidates)  # a CandidateTable's
        rows, columns = scores.shape
        return cls(
            op,
            int(rows),
            int(columns),
            jnp.dtype(scores.dtype).name,
            int(k),
            starts is not None,
            None if blocks is None else int(blocks.shape[1]),
            int(block_size),
        )

    def scores(self) -> jax.ShapeDtypeStruct:
        """The scores as a `jax.ShapeDtypeStruct` (what the implementations' checks read)."""
        return jax.ShapeDtypeStruct((self.rows, self.columns), jnp.dtype(self.dtype))

    def __str__(self) -> str:
        mask = "" if self.mask_blocks is None else f", mask of {self.mask_blocks} blocks"
        starts = ", starts" if self.starts else ""
        return (
            f"{self.op} [{self.rows}, {self.columns}] {self.dtype} k={self.k}{starts}{mask}"
            f" (B={self.block_size})"
        )
