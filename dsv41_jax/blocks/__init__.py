"""Candidate blocks: block amax and the published table."""

from dsv41_jax.blocks.api import block_amax, sort_candidate_blocks

__all__ = ["block_amax", "sort_candidate_blocks"]
