"""Top-k, masked top-k and candidate selection: every implementation, each CUDA select
forced, beside lax.top_k and torch.topk; every row checked against the reference first."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import inputs
from benchmarks.table import Row
from benchmarks.timing import Timer

DEFAULT = "auto (default)"  # the row of `implementation=None`: what the dispatch picks


def bench_topk(timer: Timer, rng, bw, impls: Sequence[str]) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    cases = [
        ("topk k=512", 1, 16384, 512),
        ("topk k=512", 8, 16384, 512),
        ("topk k=512", 8, 131072, 512),
        ("topk k=2048", 8, 131072, 2048),
        ("topk k=512", 64, 131072, 512),
        ("topk k=512", 8, 1 << 20, 512),
        ("topk k=512", 64, 1 << 20, 512),
        ("candidate top-2048", 8, 16384, 2048),
        ("candidate top-2048", 64, 16384, 2048),
    ]
    for op, bs, n, k in cases:
        candidate = op.startswith("candidate")
        length = n * 8 - 3 if candidate else n - 3  # candidate rows: lengths in positions
        sets = [(inputs.normal(rng, (bs, n)), jnp.full((bs,), length, jnp.int32)) for _ in range(3)]
        floor = bs * n * 4 / (bw * 1e3)
        shape = f"[{bs}, {n // 1024}K]"

        def fn(s, lens, impl):
            if candidate:
                return dj.select_candidate_blocks(s, lens, num_candidates=k, implementation=impl)
            return dj.topk(s, lens, k, implementation=impl)

        want = jax.jit(functools.partial(fn, impl="reference"))(*sets[0])
        for impl in (*impls, None, "reference"):  # None: the dispatch's pick
            t = timer.jax_us(
                functools.partial(fn, impl=impl), sets, want=want, what=f"{op} {shape} {impl}"
            )
            rows.append(Row(op, shape, impl or DEFAULT, t, floor))
        if "ffi" in impls:  # each CUDA select forced, beside the dispatch's pick of one ("ffi")
            mode = "candidate_blocks" if candidate else "positions"
            rows += _forced_selects(
                timer, op, shape, floor, sets, k=k, masked=None, block_size=8, mode=mode, want=want
            )
        t = timer.jax_us(lambda s, l: jax.lax.top_k(s, k)[1], sets)
        rows.append(Row(op, shape, "lax.top_k (baseline)", t, floor))
        ts = [torch.from_numpy(np.asarray(x[0])).cuda() for x in sets]
        t = timer.kernel_us(lambda i: torch.topk(ts[i % 3], k, dim=1).indices)
        rows.append(Row(op, shape, "torch.topk (baseline)", t, floor))
    rows += bench_masked_topk(timer, rng, bw, impls)
    return rows


def _forced_selects(
    timer: Timer, op, shape, floor, sets, *, k, masked, block_size, mode, want
) -> list[Row]:
    """Rows "ffi <select>" for every CUDA select that takes the call, as `topk_algorithm=`
    forces it (sets: (scores, lens) or, `masked`, (scores, lens, blocks)), and where the filter
    select may split the rows, its other form than the plan's ("ffi filter split" or "ffi filter
    clusters"), each checked against `want` (the reference's result on sets[0])."""
    from dsv41_jax import _ext
    from dsv41_jax.plan import Spec, device_record, select_declines, split_rows
    from dsv41_jax.topk import ffi as topk_ffi

    members = sets[0][2] if masked else None
    spec_op = "select_candidate_blocks" if mode == "candidate_blocks" else "topk"
    spec = Spec.of(spec_op, sets[0][0], k, starts=None, candidates=members, block_size=block_size)
    variants = [(algorithm, None, f"ffi {algorithm}") for algorithm in topk_ffi.ALGORITHMS]
    if not masked and spec.rows <= _ext.limit("filter_split_max_rows"):
        split = split_rows(spec, device_record()) is None  # the form the plan does not take
        variants.append(("filter", split, "ffi filter " + ("split" if split else "clusters")))
    rows = []
    for algorithm, split, name in variants:
        if select_declines(algorithm, spec, device_record()):
            continue

        def forced(s, lens, blocks=None, a=algorithm, split=split):
            return topk_ffi.cuda_topk(
                s,
                lens,
                k,
                starts=None,
                members=blocks,
                block_size=block_size,
                mode=mode,
                algorithm=a,
                split=split,
            )

        t = timer.jax_us(forced, sets, want=want, what=f"{op} {shape} {name}")
        rows.append(Row(op, shape, name, t, floor))
    return rows


def bench_masked_topk(timer: Timer, rng, bw, impls: Sequence[str]) -> list[Row]:
    """The consumer's mask path top-k: k=512 among the positions of 2048 candidate blocks of 8
    (random, ascending); floor = the candidate positions' scores (C·B·4 bytes per row)."""
    import torch

    import dsv41_jax as dj

    rows, c, b, k = [], 2048, 8, 512
    for bs, n in ((8, 131072), (64, 131072), (8, 1 << 20)):
        lens = jnp.full((bs,), n - 3, jnp.int32)
        blocks = jnp.asarray(
            np.sort(
                np.stack([rng.choice(n // b, c, replace=False) for _ in range(bs)]), axis=1
            ).astype(np.int32)
        )
        sets = [(inputs.normal(rng, (bs, n)), lens, blocks) for _ in range(3)]
        floor = bs * c * b * 4 / (bw * 1e3)
        op, shape = "masked topk k=512", f"[{bs}, {n // 1024}K]"

        def fn(s, lens, blocks, impl):
            return dj.topk(s, lens, k, candidates=blocks, block_size=b, implementation=impl)

        want = jax.jit(functools.partial(fn, impl="reference"))(*sets[0])
        for impl in (*impls, None, "reference"):  # None: the dispatch's pick
            t = timer.jax_us(
                functools.partial(fn, impl=impl), sets, want=want, what=f"{op} {shape} {impl}"
            )
            rows.append(Row(op, shape, impl or DEFAULT, t, floor))
        if "ffi" in impls:  # each select forced (the filter one reads only the candidate blocks)
            rows += _forced_selects(
                timer,
                op,
                shape,
                floor,
                sets,
                k=k,
                masked=True,
                block_size=b,
                mode="positions",
                want=want,
            )
        member = np.zeros((bs, n // b), bool)
        np.put_along_axis(member, np.asarray(blocks), True, axis=1)
        mask = torch.from_numpy(np.repeat(member, b, axis=1)).cuda()
        ts = [torch.from_numpy(np.asarray(x[0])).cuda() for x in sets]
        t = timer.kernel_us(
            lambda i: torch.topk(ts[i % 3].masked_fill(~mask, float("-inf")), k, dim=1).indices
        )
        rows.append(Row(op, shape, "torch mask + topk (baseline)", t, floor))
    return rows
