"""Multi-device selection with JAX's own engine: `Mesh` + `shard_map` + collectives.

Two layouts (docs/multi_device.md), both bitwise equal to the unsharded result:

- **Row sharding** (tensor parallel): the indexer is replicated; each device selects a contiguous,
  equal slice of the requests and an all-gather rebuilds the full outputs. `publish_row_sharded`
  / `select_row_sharded` wrap the `shard_map` themselves.
- **Decode context parallel (DCP)**: each device holds the compressed positions `g` with
  `(g // I) % W == rank` (interleave `I`) in its own paged cache. Every device takes its local
  top-k with global ids, the `(score, id)` pairs are all-gathered and re-selected in the same
  order; candidate blocks come from each device's local top-C of its block maxima (global ids),
  all-gathered and re-selected (or, with `exchange="pmax"`, from the all-reduced maxima of every
  block). `dcp_publish` / `dcp_select` run inside the caller's `shard_map`.
- **Prefill context parallel (PCP)**: the packed prefill keys are split into equal chunks over
  the ranks and each rank scores its own query rows against the all-gathered buffer
  (`pcp_publish_prefill` / `pcp_select_prefill`, inside the caller's `shard_map`).

Exactness of the merge: a position in the global top-k has at most k - 1 positions above it
anywhere, hence on its own device, so it is in its device's local top-k.
"""

from dsv41_jax.sharding.dcp import (
    dcp_capacity,
    dcp_local_length,
    dcp_local_to_global,
    dcp_publish,
    dcp_select,
)
from dsv41_jax.sharding.pcp import pcp_keys, pcp_publish_prefill, pcp_select_prefill
from dsv41_jax.sharding.rows import publish_row_sharded, select_row_sharded

__all__ = [
    "dcp_capacity",
    "dcp_local_length",
    "dcp_local_to_global",
    "dcp_publish",
    "dcp_select",
    "pcp_keys",
    "pcp_publish_prefill",
    "pcp_select_prefill",
    "publish_row_sharded",
    "select_row_sharded",
]
