"""The decisions of the sharded entry points, each a `Decision` with its reason: how row
sharding splits the requests, and DCP's consumer path and candidate exchange. They read only
shapes, the mesh's size and the caller's arguments, so they are made before anything is traced;
`dsv41_jax.info.explain` shows them (`Choice.plan`)."""

from __future__ import annotations

from dsv41_jax import status
from dsv41_jax.plan.layers import PATHS, Decision, Path

# dcp_publish's exchange="auto": the top-C exchange once rows hold at least this many blocks per
# candidate. Measured on 2 H200s (bs 64, C 2048, publish + select; BENCHMARKS.md, the DCP rows):
# at 16K blocks per row (128K positions) "pmax" is faster (the merge's sort costs more than the
# all-reduce it saves); at 128K blocks (1M positions) "topc" is.
TOPC_MIN_BLOCKS_PER_CANDIDATE = 32
EXCHANGES = ("auto", "topc", "pmax")


def row_sharding(batch: int, world: int) -> Decision:
    """How `publish_row_sharded` / `select_row_sharded` run `batch` requests over `world`
    devices: "rows" (each device scores batch / world of them, then all-gathers) or
    "replicated" (every device scores all: one device, or requests that do not divide)."""
    if world == 1:
        return Decision("row sharding", "replicated", "one device on the axis")
    if batch % world:
        why = f"{batch} requests do not divide over {world} devices"
        return Decision("row sharding", "replicated", why)
    return Decision("row sharding", "rows", f"{batch // world} requests a device")


def dcp_route(path: Path) -> Decision:
    """The consumer path of `dcp_select(path=...)`: "mask" or "sparse" as asked; "auto" takes
    the sparse path once `dsv41_jax.status` records the DCP sparse path as device-verified, the
    mask path until then."""
    if path not in PATHS:
        raise ValueError(f"path must be 'auto', 'mask' or 'sparse', got {path!r}")
    if path != "auto":
        return Decision("consumer path", path, f"path={path!r}, as asked")
    sparse = status.of("dcp sparse path")
    if sparse.device_verified:
        return Decision("consumer path", "sparse", f"the DCP sparse path is {sparse}")
    return Decision("consumer path", "mask", f"the DCP sparse path is {sparse}")


def dcp_exchange(exchange: str, num_blocks: int, num_candidates: int) -> Decision:
    """The candidate exchange of `dcp_publish` over rows of `num_blocks` global blocks: "topc"
    or "pmax" as asked, and for "auto" "topc" where rows hold at least
    TOPC_MIN_BLOCKS_PER_CANDIDATE · C blocks, else "pmax". ValueError for another name."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be 'auto', 'topc' or 'pmax', got {exchange!r}")
    if exchange != "auto":
        return Decision("exchange", exchange, f"exchange={exchange!r}, as asked")
    need = TOPC_MIN_BLOCKS_PER_CANDIDATE * num_candidates
    if num_blocks >= need:
        why = f"rows of {num_blocks} blocks >= {TOPC_MIN_BLOCKS_PER_CANDIDATE} x C = {need}"
        return Decision("exchange", "topc", why)
    why = f"rows of {num_blocks} blocks < {TOPC_MIN_BLOCKS_PER_CANDIDATE} x C = {need}"
    return Decision("exchange", "pmax", why)
