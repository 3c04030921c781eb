"""Selection: masked top-k, the top-C candidate blocks, and the position transforms."""

from dsv41_jax.topk.api import (
    logical_to_physical,
    select_candidate_blocks,
    sparse_columns_to_positions,
    topk,
)

__all__ = ["logical_to_physical", "select_candidate_blocks", "sparse_columns_to_positions", "topk"]
