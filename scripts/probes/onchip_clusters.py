"""The cluster of CTAs a row the SM90 one-kernel sparse select picks (ffi/sm90_sparse_select.cu),
by row count, for C = 2048 and C = 32 candidate blocks, on this GPU (the occupancy calculator
through the extension, recorded when the extension prepares the device)."""

import jax

from dsv41_jax import _ext

jax.devices()
ext = _ext.extension()
print("prepare:", ext.prepare() or "ok")
for rows in (1, 4, 8, 16, 32, 64, 128, 200):
    sizes = {c: ext.sparse_select_cluster_size(rows, c) for c in (2048, 32)}
    print(f"rows {rows}: C 2048 -> {sizes[2048]} CTAs a row, C 32 -> {sizes[32]}")
