"""MQA logits: dense paged, sparse paged over candidate blocks, ragged prefill."""

from dsv41_jax.logits.api import mqa_logits, paged_mqa_logits, sparse_paged_mqa_logits

__all__ = ["mqa_logits", "paged_mqa_logits", "sparse_paged_mqa_logits"]
