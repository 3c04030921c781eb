"""Masked top-k selection and the position transforms."""

from dsv41_jax.topk.api import logical_to_physical, sparse_columns_to_positions, topk

__all__ = ["logical_to_physical", "sparse_columns_to_positions", "topk"]
