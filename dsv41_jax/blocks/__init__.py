"""Candidate blocks: block amax, top-C block selection and the published table."""

from dsv41_jax.blocks.api import block_amax, select_candidate_blocks, sort_candidate_blocks

__all__ = ["block_amax", "select_candidate_blocks", "sort_candidate_blocks"]
