"""dsv41_jax: exact, deterministic DeepSeek-V4.1 sparse-attention indexer selection for JAX."""

# info and sharding: submodules with public names of their own (`dsv41_jax.info.explain`, ...).
from dsv41_jax import info, sharding
from dsv41_jax._ext import ExtensionUnavailable, register_ffi_targets
from dsv41_jax.blocks import block_amax, sort_candidate_blocks
from dsv41_jax.config import IndexerConfig
from dsv41_jax.indexer import (
    publish,
    publish_prefill,
    select,
    select_plain,
    select_plain_prefill,
    select_prefill,
)
from dsv41_jax.logits import mqa_logits, paged_mqa_logits, sparse_paged_mqa_logits
from dsv41_jax.plan import Plan, plan
from dsv41_jax.quality import selection_overlap
from dsv41_jax.quant import quantize_keys, quantize_queries, write_cache
from dsv41_jax.rows import row_block_table, row_lengths
from dsv41_jax.step import DecodeState, StepResult, TwoLevelIndexer, make_two_level_indexer
from dsv41_jax.topk.api import (
    logical_to_physical,
    select_candidate_blocks,
    sparse_columns_to_positions,
    topk,
)
from dsv41_jax.types import INT32_MAX, CandidateTable, KeyBuffer, PagedIndexCache, QueryBundle

__version__ = "0.2.0"  # the one version source: pyproject.toml reads it ([[tool.dynamic-metadata]])

__all__ = [
    "INT32_MAX",
    "CandidateTable",
    "DecodeState",
    "ExtensionUnavailable",
    "IndexerConfig",
    "KeyBuffer",
    "PagedIndexCache",
    "Plan",
    "QueryBundle",
    "StepResult",
    "TwoLevelIndexer",
    "block_amax",
    "info",
    "logical_to_physical",
    "make_two_level_indexer",
    "mqa_logits",
    "paged_mqa_logits",
    "plan",
    "publish",
    "publish_prefill",
    "quantize_keys",
    "quantize_queries",
    "register_ffi_targets",
    "row_block_table",
    "row_lengths",
    "select",
    "select_candidate_blocks",
    "select_plain",
    "select_plain_prefill",
    "select_prefill",
    "selection_overlap",
    "sharding",
    "sort_candidate_blocks",
    "sparse_columns_to_positions",
    "sparse_paged_mqa_logits",
    "topk",
    "write_cache",
]
