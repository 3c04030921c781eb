"""topk: the reference against the loop oracle, then every implementation (the Pallas select's
program on the CPU emulator, the CUDA source on the CPU stand-in, and on the GPU the FFI kernels
and Pallas) against the reference, exactly; logical_to_physical and sparse_columns_to_positions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import POISON, poison_device_memory, signed_zero_scores
from factories import scores as make_scores
from selection import (
    IMPLS,
    Case,
    candidate_mask,
    case_inputs,
    impl_params,
    lengths,
    params,
    run_topk,
)

import dsv41_jax as dj
from dsv41_jax.topk import mgpu_select


def expected(s, lens, k, starts=None, blocks=None, block_size=8):
    out = []
    for r in range(s.shape[0]):
        st = 0 if starts is None else int(starts[r])
        allowed = None
        if blocks is not None:
            members = {int(b) for b in blocks[r]}
            allowed = lambda p, m=members: p // block_size in m  # noqa: E731
        out.append(oracle.topk_row(s[r, st:], int(lens[r]), k, allowed))
    return np.array(out, np.int32)


@pytest.mark.parametrize("kind", ["random", "ties", "equal", "special", "denormal"])
@pytest.mark.parametrize("n,k", [(1, 1), (9, 8), (64, 8), (300, 16), (1000, 64), (64, 100)])
def test_topk_matches_oracle(rng, kind, n, k):
    rows = 12
    s = make_scores(rng, rows, n, kind)
    lens = lengths(rng, rows, n, k)
    got = np.asarray(dj.topk(jnp.asarray(s), jnp.asarray(lens), k, implementation="reference"))
    np.testing.assert_array_equal(got, expected(s, lens, k))


def test_topk_starts_ragged_rows(rng):
    rows, n, k = 10, 200, 16
    s = make_scores(rng, rows, n, "ties")
    starts = rng.integers(0, n, rows).astype(np.int32)
    lens = np.array([rng.integers(0, n - st + 1) for st in starts], np.int32)
    lens[:3] = [0, 1, n - starts[2]]
    got = dj.topk(jnp.asarray(s), jnp.asarray(lens), k, starts=jnp.asarray(starts))
    np.testing.assert_array_equal(np.asarray(got), expected(s, lens, k, starts=starts))


@pytest.mark.parametrize("block_size", [4, 8])
def test_topk_candidate_mask(rng, block_size):
    rows, n, k, c = 8, 400, 24, 10
    s = make_scores(rng, rows, n, "special")
    lens = lengths(rng, rows, n, k)
    blocks = candidate_mask(rng, lens, c, block_size)
    got = dj.topk(
        jnp.asarray(s), jnp.asarray(lens), k, candidates=jnp.asarray(blocks), block_size=block_size
    )
    np.testing.assert_array_equal(
        np.asarray(got), expected(s, lens, k, blocks=blocks, block_size=block_size)
    )


def test_topk_negative_zero_ties_positive_zero():
    s = jnp.array([[0.0, -0.0, 0.0, -0.0, -1.0]], jnp.float32)
    got = dj.topk(s, jnp.array([5], jnp.int32), 2)
    np.testing.assert_array_equal(np.asarray(got), [[0, 1]])


# Denormals exact in float32 and bfloat16 (bit patterns 1, 3 and 0x7F << 16), smallest first.
D1, D3, DMAX = np.array([1 << 16, 3 << 16, 0x7F << 16], np.uint32).view(np.float32)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_topk_orders_denormal_scores_as_numbers(dtype):
    """Denormals, +-0.0 and negatives rank by IEEE value (XLA's CPU backend flushes denormals
    to zero in float compares); -0.0 ties +0.0, the smaller position first."""
    row = np.array([D1, -0.0, D3, -D1, 0.0, -D3, DMAX, -0.0, -1.0, D1, 1.0], np.float32)
    # 1.0, DMAX, D3, D1 (positions 0, 9), the zeros (1, 4, 7), -D1, -D3, -1.0.
    ranked = [10, 6, 2, 0, 9, 1, 4, 7, 3, 5, 8]
    pos = np.arange(len(row))
    assert list(np.lexsort((pos, -row.astype(np.float64)))) == ranked  # NumPy agrees
    s = jnp.asarray(row[None].astype(dtype))  # NumPy casts denormals exactly
    n = jnp.array([len(row)], jnp.int32)
    for k in (1, 2, 3, 4, 5, 7, 9, 11, 12):
        want = sorted(ranked[:k]) + [-1] * (k - len(ranked))
        np.testing.assert_array_equal(np.asarray(dj.topk(s, n, k))[0], want, err_msg=f"k={k}")


def test_topk_bf16_scores(rng):
    s = make_scores(rng, 4, 100, "ties").astype(jnp.bfloat16)
    lens = np.array([100, 50, 3, 0], np.int32)
    got = dj.topk(jnp.asarray(s), jnp.asarray(lens), 10)
    np.testing.assert_array_equal(np.asarray(got), expected(np.asarray(s, np.float32), lens, 10))


def test_topk_jit_and_bitwise_repeatable(rng):
    s, lens = make_scores(rng, 6, 500, "ties"), np.full(6, 480, np.int32)
    f = jax.jit(lambda s, n: dj.topk(s, n, 32))
    first = np.asarray(f(jnp.asarray(s), jnp.asarray(lens)))
    for _ in range(5):
        np.testing.assert_array_equal(np.asarray(f(jnp.asarray(s), jnp.asarray(lens))), first)
    np.testing.assert_array_equal(first, expected(s, lens, 32))


def test_topk_under_jit_clamps_lengths_past_the_row(rng):
    s = make_scores(rng, 2, 16, "random")
    got = jax.jit(lambda s, n: dj.topk(s, n, 20))(jnp.asarray(s), jnp.array([99, -5], jnp.int32))
    np.testing.assert_array_equal(np.asarray(got), expected(s, [16, 0], 20))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda s, n: dj.topk(s, n, 0), "k must be a positive int"),
        (lambda s, n: dj.topk(s, n, -3), "k must be a positive int"),
        (lambda s, n: dj.topk(s[0], n, 4), "scores must have rank 2"),
        (lambda s, n: dj.topk(s.astype(jnp.int32), n, 4), "scores must have a floating dtype"),
        (lambda s, n: dj.topk(s, n.astype(jnp.float32), 4), "lengths must have an integer"),
        (lambda s, n: dj.topk(s, n[:2], 4), "lengths must have shape"),
        (lambda s, n: dj.topk(s, n + 100, 4), "lengths must lie in"),
        (lambda s, n: dj.topk(s, n, 4, starts=n[:1]), "starts must have shape"),
        (lambda s, n: dj.topk(s, n, 4, starts=n), "starts \\+ lengths"),
        (lambda s, n: dj.topk(s, n, 4, candidates=jnp.zeros((2, 4), jnp.int32)), "candidates"),
        (lambda s, n: dj.topk(s, n, 4, implementation="nope"), "unknown implementation 'nope'"),
    ],
)
def test_topk_bad_inputs_raise(call, match):
    s = jnp.zeros((3, 32), jnp.float32)
    n = jnp.array([32, 10, 0], jnp.int32)
    with pytest.raises(ValueError, match=match):
        call(s, n)


# ------------------------------------------------------------ every implementation, exactly
KINDS = ("random", "ties", "equal", "special", "ascending", "descending")
# (rows, n, k) and the score kinds run at that size (fewer at the large GPU-only sizes, where
# each case costs a compile and ~8M-score inputs).
SIZES = (
    ((12, 999, 64), KINDS),  # one CTA a row; unaligned rows (scalar loads); every edge length
    ((4, 1024, 40), KINDS),
    ((8, 6000, 512), ("random", "ties", "special")),  # one CTA: 4097-8192 scores a row
    ((1, 1 << 17, 512), KINDS),  # one row over a cluster: sampled bars, the gather
    ((2, 100000, 1500), KINDS),  # chunks whose top-k fill the first CTA's buffer
    ((3, 40000, 4096), KINDS),  # the largest k the filter kernel takes: cuts while streaming
    ((2, 12288, 4096), ("random", "ascending")),  # filter: the buffer filled to its last pair
    ((5, 300, 2048), ("random", "special")),  # k above the row
    ((8, 131072, 512), KINDS),
    ((64, 16384, 512), ("random", "ties", "special")),
    ((64, 131072, 512), ("random", "ties", "special")),
    ((200, 16000, 1500), ("random", "ties", "descending")),  # one CTA per row
    ((3, 1 << 20, 512), ("random", "equal", "special")),
    ((8, 1 << 20, 512), ("random", "ties", "ascending")),
    ((3, 1 << 20, 2048), ("random", "ties")),
)
CASES = [Case(r, n, k, kind) for (r, n, k), kinds in SIZES for kind in kinds]
# The CUDA selects on the CPU stand-in (seconds a case under AddressSanitizer) skip "ties" and
# "equal" at the SIZES above 100,000 scores (1 x 131072, 2 x 100000, 3 x 40000); the GPU
# implementations and the emulated Pallas select still run every kind there. What those kinds
# add is ties at the k-th key, which every large size still has on the emulated selects:
# "special" (six values plus NaN and +-inf: ties at the k-th key at all three sizes), RAGGED's
# ties-2x100000-k1500-bfloat16 and ties-9x20000-k64-mask300b4messy; the tie paths of each
# select are also checked directly (tests/test_filter_select.py: "ties" and "plateau" rows and
# the tie mutants; tests/test_short_select_cluster.py), and all six kinds run on the emulated
# selects at every size up to 100,000 scores.
EMULATED_CUDA = ("emulated-cluster", "emulated-filter", "emulated-short")
EMULATED_LARGE = 100_000
EMULATED_LARGE_KINDS = ("random", "special", "ascending", "descending")
EMULATED_CASES = [
    c for c in CASES if c.rows * c.n <= EMULATED_LARGE or c.kind in EMULATED_LARGE_KINDS
]
RAGGED = [
    Case(12, 70144, 512, "special", mask=2048),
    Case(12, 70144, 512, "special", starts=True),
    Case(9, 30000, 512, "special", starts=True),
    Case(6, 3000, 64, "ties", starts=True, mask=40),  # ragged and masked (gathered by Pallas)
    Case(6, 3000, 64, "ties", starts=True, dtype="bfloat16"),
    Case(3, 1024, 30, "ties", mask=12),
    Case(5, 20000, 512, "special", mask=2048),  # masked: one round per chunk of 8192
    Case(9, 20000, 64, "ties", mask=300, messy=True, block_size=4),  # scalar gathers
    Case(2, 100000, 2048, "random", mask=8192),  # masked chunks above the buffer: sampled bars
    Case(2, 100000, 2048, "ascending", mask=8192, messy=True),
    Case(8, 131072, 512, "random", mask=2048),  # the consumer's mask path at V4.1 sizes
    Case(64, 131072, 512, "ties", mask=2048, messy=True),
    Case(8, 1 << 20, 512, "special", mask=2048),
    Case(12, 1001, 64, "ties", dtype="bfloat16"),
    Case(12, 1001, 64, "special", dtype="bfloat16"),
    Case(12, 999, 64, "denormal"),
    Case(12, 1001, 64, "denormal", dtype="bfloat16"),
    Case(2, 100000, 1500, "ties", dtype="bfloat16"),
    Case(8, 131072, 512, "random", dtype="bfloat16"),
    Case(8, 1 << 20, 2048, "ties", dtype="bfloat16"),
    Case(3, 20000, 512, "special", mask=2048, dtype="bfloat16"),  # bf16 gathered (Pallas)
    Case(8, 131072, 512, "ties", mask=2048, messy=True, dtype="bfloat16"),
]


def reference(inputs, k, block_size=8):
    return np.asarray(
        dj.topk(
            jnp.asarray(inputs["scores"]),
            jnp.asarray(inputs["lens"]),
            k,
            starts=None if "starts" not in inputs else jnp.asarray(inputs["starts"]),
            candidates=None if "candidates" not in inputs else jnp.asarray(inputs["candidates"]),
            block_size=block_size,
            implementation="reference",
        )
    )


@pytest.mark.parametrize(
    "impl,case",
    params(CASES + RAGGED, [name for name in IMPLS if name not in EMULATED_CUDA])
    + params(EMULATED_CASES + RAGGED, EMULATED_CUDA),
)
def test_topk_equals_reference(request, rng, impl, case):
    inputs = case_inputs(rng, case, make_scores)
    got = run_topk(
        impl,
        request,
        inputs["scores"],
        inputs["lens"],
        case.k,
        starts=inputs.get("starts"),
        candidates=inputs.get("candidates"),
        block_size=case.block_size,
    )
    np.testing.assert_array_equal(
        got, reference(inputs, case.k, case.block_size), err_msg=impl.name
    )


@pytest.mark.parametrize("impl", impl_params(Case(6, 4096, 512)))
def test_topk_never_reads_past_length(request, rng, impl):
    s = make_scores(rng, 6, 4096, "random")
    lens = np.array([0, 1, 100, 513, 4000, 4096], np.int32)
    poisoned = np.where(np.arange(4096)[None] < lens[:, None], s, np.inf).astype(np.float32)
    got = run_topk(impl, request, poisoned, lens, 512)
    np.testing.assert_array_equal(got, reference({"scores": s, "lens": lens}, 512))


@pytest.mark.parametrize("impl", impl_params(Case(3, 40001, 512)))
def test_topk_full_unaligned_rows_read_nothing_past_the_buffer(request, rng, impl):
    """Every row whole and of odd length (no row 16-byte aligned after the first; the last one
    ends the buffer) with ragged starts reaching its end: the stand-in runs under
    AddressSanitizer against exact-size buffers, so a load one past the end aborts."""
    for n, k in ((40001, 512), (999, 64)):
        s = make_scores(rng, 3, n, "random")
        full = np.full(3, n, np.int32)
        got = run_topk(impl, request, s, full, k)
        np.testing.assert_array_equal(got, reference({"scores": s, "lens": full}, k))
        if not impl.starts:
            continue
        starts = np.array([0, 1, n - 5], np.int32)
        lens = n - starts
        got = run_topk(impl, request, s, lens, k, starts=starts)
        want = reference({"scores": s, "lens": lens, "starts": starts}, k)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "impl", impl_params(Case(8, 131072, 512), ["ffi", "ffi-filter", "ffi-short", "pallas"])
)
def test_topk_bitwise_repeatable_on_device(request, rng, impl):
    s, lens = make_scores(rng, 8, 131072, "ties"), np.full((8,), 131000, np.int32)
    first = run_topk(impl, request, s, lens, 512)
    for _ in range(10):
        np.testing.assert_array_equal(run_topk(impl, request, s, lens, 512), first)


@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("impl", impl_params(Case(20, 131072, 512), ["ffi", "ffi-short"]))
def test_topk_rows_in_two_waves_of_clusters(request, rng, impl, kind):
    """20 rows of 128K: more clusters of 8 CTAs than run at once (15 on an H100 or H200), which
    the plan runs on the short select in two waves; lengths at the edges."""
    s, lens = make_scores(rng, 20, 131072, kind), lengths(rng, 20, 131072, 512)
    got = run_topk(impl, request, s, lens, 512)
    np.testing.assert_array_equal(got, reference({"scores": s, "lens": lens}, 512))


@pytest.mark.parametrize(
    "impl",
    impl_params(Case(1, 16000, 1500), ["emulated-filter", "ffi-filter"]),
)
def test_filter_sampled_bar_too_high_streams_again(request, impl):
    """The only large keys sit exactly at the positions the filter kernel samples (one CTA per
    row): its bar lets fewer than k through and the chunk is streamed again without one."""
    rows = 1 if impl.name.startswith("emulated") else 200
    n, k = 16000, 1500
    s = np.full((rows, n), -5.0, np.float32)
    s[:, (np.arange(1024) * n) // 1024] = 3.0
    lens = np.full(rows, n, np.int32)
    got = run_topk(impl, request, s, lens, k)
    np.testing.assert_array_equal(got, reference({"scores": s, "lens": lens}, k))


@pytest.mark.parametrize(
    "impl",
    impl_params(Case(1, 60000, 512), ["emulated-filter", "ffi-filter", "ffi-filter-clusters"]),
)
def test_filter_chunks_gathered_uncut_only_where_they_fit(request, rng, impl):
    """Rows of 4 chunks of 15000 whose sampled bars each let a plateau of ties through: 4 x 2000
    pairs fit the first CTA's buffer of 12288 and are gathered uncut, 4 x 3500 do not and each
    chunk is cut to its top k first (the last row a length cut short)."""
    rows = 1 if impl.name.startswith("emulated") else 16
    n, k = 60000, 512
    for plateau in (2000, 3500):
        s = (rng.standard_normal((rows, n)) * 0.1 - 2.0).astype(np.float32)
        for r in range(rows):
            for c in range(4):
                s[r, c * 15000 + rng.choice(15000, plateau, replace=False)] = 1.0
        lens = np.full(rows, n, np.int32)
        lens[-1] -= 7
        got = run_topk(impl, request, s, lens, k)
        want = reference({"scores": s, "lens": lens}, k)
        np.testing.assert_array_equal(got, want, err_msg=f"plateau {plateau}")


@pytest.mark.parametrize(
    "impl",
    impl_params(
        Case(4, 60000, 4096), ["emulated-filter", "ffi-filter", "ffi-filter-clusters", "ffi"]
    ),
)
def test_filter_bars_on_signed_zeros_and_denormals(request, rng, impl):
    """Scores at and around +-0 (denormals, +0 and -0, NaN, -inf): the filter select compares
    scores with its bars as floats, so -0 must still tie +0 and denormals must not be flushed.
    k = 512: the sampled bar is the key of +-0 and the k-th key a denormal; k = 4096: the buffer
    fills and its cuts raise the bar to just above a denormal or +-0."""
    lens = np.array([60000, 59001, 31234, 20000], np.int32)
    for k, kind in ((512, "zeros"), (4096, "zeros-cut")):
        s = signed_zero_scores(rng, (4, 60000), kind)
        got = run_topk(impl, request, s, lens, k)
        want = reference({"scores": s, "lens": lens}, k)
        np.testing.assert_array_equal(got, want, err_msg=f"k={k}")


def _split_rows(rng, n: int, k: int, dtype) -> np.ndarray:
    """8 rows for the split filter select: spread, ascending (the last chunk overflows its slot),
    large keys only at the row sample's positions, fewer than k (every chunk streamed again), ties
    at the k-th key, a plateau of ties in every chunk, NaN and -inf runs, all equal, bf16 ties."""
    rows = rng.standard_normal((8, n)).astype(np.float32)
    rows[1] = np.sort(rows[1])
    rows[2] = -5.0
    rows[2, rng.choice(np.arange(4096) * n // 4096, k * 4 // 5, replace=False)] = 3.0
    rows[3, rng.choice(n, 3 * k, replace=False)] = 9.0
    rows[4] = rows[4] * 0.1 - 2.0
    rows[4, rng.choice(n, 3500 * 16, replace=False)] = 1.0
    rows[5, rng.choice(n, n // 2, replace=False)] = np.nan
    rows[5, rng.choice(n, n // 4, replace=False)] = -np.inf
    rows[6] = 0.5
    rows[7] = np.round(rows[7] * 4) / 4  # few distinct values: ties everywhere
    return rows.astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 2048])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_filter_split_rows(request, rng, k, dtype):
    """[8, 128K] through the filter select's split rows (each row over more CTAs than a cluster
    holds, merged through its workspace) equals the reference; the workspace, read after
    poisoned memory, shows the split path ran: the spread row's bar and its first chunk's count
    written, its merge's arrival count zeroed, and every chunk of the row-sample row arrived
    after streaming again."""
    from dsv41_jax import _ext
    from dsv41_jax.topk import ffi as topk_ffi

    n = 131072
    s = _split_rows(rng, n, k, jnp.dtype(dtype))
    lens = np.full(8, n, np.int32)
    lens[0] -= 1234
    got = run_topk(IMPLS["ffi-filter"], request, s, lens, k)
    np.testing.assert_array_equal(got, reference({"scores": s, "lens": lens}, k))

    words = _ext.limit("filter_split_row_words")
    poison_device_memory()
    _, workspace = jax.jit(
        lambda s, n: jax.ffi.ffi_call(
            topk_ffi.FILTER_TOPK,
            (
                jax.ShapeDtypeStruct((8, k), jnp.int32),
                jax.ShapeDtypeStruct((8 * words,), jnp.uint32),
            ),
        )(
            s,
            n,
            jnp.zeros((8,), jnp.int32),
            jnp.zeros((8, 1), jnp.int32),
            k=np.int32(k),
            block_size=np.int32(8),
            mode=np.int32(0),
            has_starts=False,
            has_members=False,
        )
    )(jnp.asarray(s), jnp.asarray(lens))
    w = np.asarray(workspace).reshape(8, words)
    assert 0 < w[0, 0] < 12288 and 1 < w[0, 32] != POISON, "the split path did not run"
    assert w[0, 33] == 0, "the merge's arrival count was not zeroed"
    assert 2 <= w[2, 33] <= 16, "the row-sample row was not streamed again in every chunk"


@pytest.mark.parametrize("impl", impl_params(Case(5, 999, 64)))
def test_topk_kth_bin_filled_down_to_its_lowest_key(request, rng, impl):
    """Powers of two and zero are the lowest keys of their radix bins: when the k-th key's bin
    holds exactly the keys still needed, the threshold must sit just below that bin, so the
    k-th key itself (equal to the bin's lowest key) is taken, and +0.0 / -0.0 too."""
    n, k = 999, 64
    groups = (
        ((4.0, 40), (2.0, 24), (1.0, n - 64)),
        ((4.0, 63), (1.0, 1), (0.0, n - 64)),
        ((0.0, 32), (-0.0, 32), (-1.0, n - 64)),
        ((4.0, 30), (0.0, 34), (-0.5, n - 64)),
        ((2.0, 64), (2.0, 0), (-4.0, n - 64)),
    )
    s = np.stack([rng.permutation(np.repeat(*zip(*g))) for g in groups]).astype(np.float32)
    lens = np.full(5, n, np.int32)
    got = run_topk(impl, request, s, lens, k)
    np.testing.assert_array_equal(got, reference({"scores": s, "lens": lens}, k))


@pytest.mark.parametrize("impl", impl_params(Case(2, 100000, 3000)))
def test_topk_keys_one_ulp_apart(request, rng, impl):
    """Four adjacent floats, shuffled: after a cut the filter kernel's bar is exactly one key above
    the k-th, so a later key one ulp higher must still get in and a tie must not."""
    n, k = 100000, 3000
    one_up = np.nextafter(np.float32(1.0), np.float32(2.0), dtype=np.float32)
    values = np.array([1.0, one_up, np.nextafter(one_up, np.float32(2.0)), 0.5], np.float32)
    s = values[rng.integers(0, 4, (2, n))]
    lens = np.array([n, n - 1], np.int32)
    got = run_topk(impl, request, s, lens, k)
    np.testing.assert_array_equal(got, reference({"scores": s, "lens": lens}, k))


def test_filter_kernel_refuses_a_mask_too_large_for_shared_memory(simt_topk, rng):
    """A masked row's bitmap (one bit per block) and block list live in shared memory: rows of
    4M one-position blocks would need 512 KiB, and the launcher must refuse, not overrun."""
    from selection import emulate

    s = np.zeros((1, 1 << 22), np.float32)
    members = np.array([[1, 64]], np.int32)
    status, _ = emulate(simt_topk, "filter", s, [1 << 22], 8, members=members, block_size=1)
    assert status != 0
    status, got = emulate(
        simt_topk, "filter", s[:, :4096], [4096], 8, members=members, block_size=1
    )
    assert status == 0 and got.tolist() == [[1, 64, -1, -1, -1, -1, -1, -1]]


@pytest.mark.parametrize(
    "source,dtype,k,shape,members",
    [
        ("f32", jnp.float32, 512, (8, 16384), 0),
        ("f32", jnp.float32, 512, (8, 131072), 2048),  # gathered: one CTA a row
        ("f32", jnp.float32, 512, (8, 131072), 8192),  # chunks, then their candidates
        ("bf16", jnp.bfloat16, 2048, (2, 1 << 20), 0),  # three launches
        ("f32", jnp.float32, 64, (3, 999), 0),  # scalar loads
        ("blocks", jnp.float32, 2048, (8, 16384), 0),
    ],
)
def test_pallas_select_lowers_for_cuda(source, dtype, k, shape, members):
    """The SIMT program becomes a Mosaic GPU kernel at V4.1 shapes (the MLIR it emits verifies;
    only the device compiles it further)."""
    rows, n = shape
    args = [jax.ShapeDtypeStruct(shape, dtype), jax.ShapeDtypeStruct((rows,), jnp.int32)]
    if members:
        args.append(jax.ShapeDtypeStruct((rows, members), jnp.int32))

    def f(s, lens, m=None):
        return mgpu_select.select(mgpu_select.launch, source, s, lens, k, members=m)

    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    gathered = members and mgpu_select.gathers(n, members, 8)
    launches = 1 if gathered else len(mgpu_select.stages(n, k))
    assert text.count("custom_call @mosaic_gpu") == launches


def test_logical_to_physical(rng):
    rows, k, pages, page_size = 6, 40, 5, 16
    idx = rng.integers(-1, pages * page_size + 20, (rows, k)).astype(np.int32)
    bt = rng.integers(-1, 100, (rows, pages)).astype(np.int32)
    got = np.asarray(dj.logical_to_physical(jnp.asarray(idx), jnp.asarray(bt), page_size))
    want = np.array([oracle.physical_row(idx[r], bt[r], page_size) for r in range(rows)])
    np.testing.assert_array_equal(got, want)


def test_logical_to_physical_kernel_on_the_stand_in(simt_topk, rng):
    """The CUDA kernel on the CPU stand-in (under AddressSanitizer): positions past the page
    table, negative pages and -1 never index outside the table."""
    from selection import emulate_page_kernel

    rows, k, pages, page_size = 7, 300, 9, 64
    idx = rng.integers(-3, pages * page_size + 200, (rows, k)).astype(np.int32)
    idx[0, :3] = [-1, 2**31 - 1, pages * page_size]
    bt = rng.integers(-1, 1000, (rows, pages)).astype(np.int32)
    got = emulate_page_kernel(
        simt_topk, "l2p", (rows, k, pages, page_size), (idx, bt), np.int32, (rows, k)
    )
    want = dj.logical_to_physical(jnp.asarray(idx), jnp.asarray(bt), page_size)
    np.testing.assert_array_equal(got, np.asarray(want))


def test_logical_to_physical_bad_inputs():
    with pytest.raises(ValueError, match="block_table must have shape"):
        dj.logical_to_physical(jnp.zeros((2, 4), jnp.int32), jnp.zeros((3, 4), jnp.int32), 64)
    with pytest.raises(ValueError, match="page_size must be a positive int"):
        dj.logical_to_physical(jnp.zeros((2, 4), jnp.int32), jnp.zeros((2, 4), jnp.int32), 0)


def test_sparse_columns_to_positions():
    table = dj.CandidateTable(
        blocks=jnp.array([[2, 5, 9, dj.INT32_MAX]], jnp.int32),
        count=jnp.array([3], jnp.int32),
        valid_lens=jnp.array([19], jnp.int32),
        physical=jnp.full((1, 4), -1, jnp.int32),
        block_size=8,
    )
    cols = jnp.array([[0, 7, 8, 18, -1]], jnp.int32)
    got = dj.sparse_columns_to_positions(cols, table, 8)
    np.testing.assert_array_equal(np.asarray(got), [[16, 23, 40, 74, -1]])


# ------------------------------------------------ the FFI kernels on the GPU (device machine)


@pytest.mark.gpu
def test_ffi_logical_to_physical_matches_reference(rng):
    rows, k, pages, p = 64, 512, 2048, 64
    idx = rng.integers(-1, pages * p + 100, (rows, k)).astype(np.int32)
    bt = rng.integers(-1, 100_000, (rows, pages)).astype(np.int32)
    args = (jnp.asarray(idx), jnp.asarray(bt), p)
    np.testing.assert_array_equal(
        np.asarray(dj.logical_to_physical(*args, implementation="ffi")),
        np.asarray(dj.logical_to_physical(*args, implementation="reference")),
    )


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["topk", "candidates"])
def test_ffi_select_program_is_its_kernel_alone(rng, op):
    """An unmasked select without starts compiles to its custom call and nothing else: the
    operands it does not read are literals, not zeros filled by a kernel every call."""
    s = jnp.asarray(make_scores(rng, 8, 16384, "random"))
    if op == "topk":
        lens = jnp.full((8,), 16381, jnp.int32)

        def select(s, n, impl):
            return dj.topk(s, n, 512, implementation=impl)
    else:
        lens = jnp.full((8,), 16384 * 8 - 3, jnp.int32)  # positions

        def select(s, n, impl):
            return dj.select_candidate_blocks(s, n, num_candidates=2048, implementation=impl)

    f = jax.jit(lambda s, n: select(s, n, "ffi"))
    text = f.lower(s, lens).compile().as_text()
    entry = text[text.index("ENTRY") :]
    assert entry.count("custom-call(") == 1 and "fusion(" not in entry, entry
    np.testing.assert_array_equal(np.asarray(f(s, lens)), np.asarray(select(s, lens, "reference")))
