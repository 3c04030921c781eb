"""Minimal repro: an XLA FFI custom call inside an eager (un-jitted) `jax.shard_map` on 2+ GPUs.

Each variant runs in its own process (a segfault ends only that one) and prints
`OK|FAIL <variant> rc=<code>` (rc -11 is SIGSEGV). The raw `jax.ffi.ffi_call`s are used, not the
library's wrappers (which never pass a zero-size operand). Run on a machine with 2+ GPUs:
python3 scripts/probes/eager_shard_map_ffi.py

Seen on 2 H200s (jax/jaxlib 0.11.2, 2026-11-30): only the variants with a zero-size operand
under an eager multi-device shard_map die with SIGSEGV (rc -11), with or without command
buffers; a [rows, 1] operand, another target, a 1-device mesh, or jax.jit around the shard_map
all run. The radix top-k's ABI then took a `has_members` flag instead of a [rows, 0] operand.
A call that omits a declared attribute (this probe before `has_members` was added to it) also
died with SIGSEGV in every variant: pass exactly the attributes docs/ffi_targets.md lists.
"""

from __future__ import annotations

import os
import subprocess
import sys

VARIANTS = {
    "eager_topk_empty_members": "eager shard_map, radix top-k with a [rows, 0] members operand",
    "eager_topk_real_members": "eager shard_map, radix top-k with a [rows, 1] members operand",
    "eager_l2p": "eager shard_map, logical_to_physical (no zero-size operand)",
    "eager_topk_one_device": "eager shard_map over a 1-device mesh",
    "eager_topk_no_cmdbuf": "as the first, XLA command buffers off",
    "jit_topk_empty_members": "jax.jit(shard_map(...)), radix top-k, [rows, 0] members",
}


def run(variant: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from dsv41_jax import _ext

    _ext.register_ffi_targets()
    devices = jax.devices()[:1] if variant.endswith("one_device") else jax.devices()
    mesh = Mesh(np.array(devices), ("x",))
    rows, n, k = 4, 4096, 64
    m = 1 if "real_members" in variant else 0

    def topk_body(scores, lens):
        members = jnp.zeros((scores.shape[0], m), jnp.int32)
        out = jax.ShapeDtypeStruct((scores.shape[0], k), jnp.int32)
        return jax.ffi.ffi_call("dsv41_cluster_topk", out, vmap_method="sequential")(
            scores,
            lens,
            jnp.zeros_like(lens),
            members,
            k=np.int32(k),
            block_size=np.int32(8),
            mode=np.int32(0),
            has_starts=False,
            has_members=m > 0,
        )

    def l2p_body(scores, lens):
        idx = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (scores.shape[0], k))
        bt = jnp.zeros((scores.shape[0], 4), jnp.int32)
        out = jax.ShapeDtypeStruct(idx.shape, jnp.int32)
        return jax.ffi.ffi_call("dsv41_logical_to_physical", out, vmap_method="sequential")(
            idx, bt, page_size=np.int32(64)
        )

    body = l2p_body if variant == "eager_l2p" else topk_body
    f = jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P(), check_vma=False)
    if variant.startswith("jit_"):
        f = jax.jit(f)
    scores = jnp.asarray(np.random.default_rng(0).standard_normal((rows, n)), jnp.float32)
    lens = jnp.full((rows,), n, jnp.int32)
    out = jax.block_until_ready(f(scores, lens))
    print("result shape", out.shape, "devices", len(devices), flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    for name, what in VARIANTS.items():
        env = dict(os.environ)
        if name.endswith("no_cmdbuf"):
            env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer="
        p = subprocess.run(
            [sys.executable, __file__, name], env=env, capture_output=True, text=True
        )
        tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
        print(f"{'OK' if p.returncode == 0 else 'FAIL'} {name} rc={p.returncode}: {what}")
        for line in tail:
            print("    ", line[:300])


if __name__ == "__main__":
    main()
