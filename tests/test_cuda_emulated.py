"""The CUDA top-k kernels' own source, run on the CPU through a SIMT stand-in (tests/simt/):
every CUDA thread a fiber, barriers and warp shuffles as generation counters, a cluster's CTAs on
concurrent OS threads with their own shared memory. Outputs are poisoned, shared memory starts
as garbage, and every result must equal the reference exactly.

This checks the kernels' logic (indexing, barrier placement, the cluster protocol, every
fallback) in CI, without a GPU. It is no substitute for the device tests (test_gpu_topk.py):
no memory model, timing or bounds traps of the GPU."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import jax.numpy as jnp
import numpy as np
import pytest
from factories import scores as make_scores

import dsv41_jax as dj

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIMT = ROOT / "tests" / "simt"
UNWRITTEN = 0x7EADBEEF  # what topk_main.cc fills the output with before the launch


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("needs g++ to build the SIMT stand-in")
    exe = tmp_path_factory.mktemp("simt") / "topk_emu"
    sources = [SIMT / f for f in ("topk_main.cc", "filter_topk.cc", "radix_topk.cc")]
    cmd = [cxx, "-std=c++20", "-O2", "-fno-extern-tls-init", f"-I{SIMT}", f"-I{ROOT / 'cuda'}"]
    subprocess.run([*cmd, "-o", str(exe), *map(str, sources), "-lpthread"], check=True)
    return exe


def launch(exe, kernel, scores, lens, k, starts=None, members=None, block_size=8, mode=0):
    """Runs LaunchFilterTopk / LaunchRadixTopk on one case; returns (cudaError, out)."""
    rows, n = scores.shape
    m = 0 if members is None else members.shape[1]
    bf16 = scores.dtype == jnp.bfloat16
    work = pathlib.Path(exe).parent
    case, out = work / f"case_{kernel}", work / f"out_{kernel}"
    with open(case, "wb") as f:
        header = [rows, n, k, block_size, mode, starts is not None, members is not None, m, bf16]
        np.array(header, np.int64).tofile(f)
        np.ascontiguousarray(scores if bf16 else scores.astype(np.float32)).tofile(f)
        np.asarray(lens, np.int32).tofile(f)
        np.asarray(np.zeros(rows) if starts is None else starts, np.int32).tofile(f)
        if members is not None:
            np.asarray(members, np.int32).tofile(f)
    subprocess.run([str(exe), kernel, str(case), str(out)], check=True, timeout=600)
    raw = np.fromfile(out, np.int32)
    return int(raw[0]), raw[1:].reshape(rows, k)


def check(exe, kernel, s, lens, k, **kw):
    status, got = launch(exe, kernel, s, lens, k, **kw)
    assert status == 0, f"{kernel}: launch error {status}"
    assert not (got == UNWRITTEN).any(), "an output element was never written"
    cand = kw.get("members")
    want = dj.topk(
        jnp.asarray(s),
        jnp.asarray(lens),
        k,
        starts=None if kw.get("starts") is None else jnp.asarray(kw["starts"]),
        candidates=None if cand is None else jnp.asarray(cand),
        block_size=kw.get("block_size", 8),
        implementation="reference",
    )
    np.testing.assert_array_equal(got, np.asarray(want), err_msg=kernel)


def edge_lengths(rng, rows, n, k):
    base = [x for x in (0, 1, 7, 8, 9, k - 1, k, k + 1, n - 1, n) if 0 <= x <= n]
    return np.array([base[i] if i < len(base) else rng.integers(0, n + 1) for i in range(rows)])


KINDS = ["random", "ties", "equal", "special", "ascending", "descending"]


@pytest.mark.parametrize("kernel", ["filter", "radix"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "rows,n,k",
    [
        (12, 999, 64),  # one CTA a row, unaligned rows (scalar loads), every edge length
        (1, 1 << 17, 512),  # a cluster of 8: sampled bars, the gather through shared memory
        (2, 100000, 1500),  # 8 chunks of 12500: the gathered top-k fill the buffer
        (3, 40000, 4096),  # the largest k: cuts while streaming
    ],
)
def test_kernel_equals_reference(emulator, rng, kernel, kind, rows, n, k):
    s = make_scores(rng, rows, n, kind)
    lens = edge_lengths(rng, rows, n, k) if rows > 3 else np.full(rows, n)
    check(emulator, kernel, s, lens, k)


@pytest.mark.parametrize("kernel", ["filter", "radix"])
def test_sampled_bar_too_high_streams_again(emulator, kernel):
    """The only large keys sit exactly at the sampled positions: the sampled bar lets fewer than
    k through, and the filter kernel must stream the chunk again without one."""
    # One CTA (a second would get less than one 8192-key round); above kFilterCapacity (12288
    # keys), so the chunk's bar is sampled.
    n, k = 16000, 1500
    s = np.full((1, n), -5.0, np.float32)
    s[0, (np.arange(1024) * n) // 1024] = 3.0
    check(emulator, kernel, s, np.array([n]), k)


@pytest.mark.parametrize("kernel", ["filter", "radix"])
@pytest.mark.parametrize("kind", ["random", "ties", "special"])
@pytest.mark.parametrize("rows,n,k", [(12, 1001, 64), (2, 100000, 1500)])
def test_bf16_scores(emulator, rng, kernel, kind, rows, n, k):
    """bfloat16 rows (16-byte loads of 8 values, scalar loads on odd rows): the keys of their
    exact float32 values, so bf16 ties stay ties."""
    s = make_scores(rng, rows, n, kind).astype(jnp.bfloat16)
    lens = edge_lengths(rng, rows, n, k) if rows > 3 else np.full(rows, n)
    check(emulator, kernel, s, lens, k)


@pytest.mark.parametrize("kernel", ["filter", "radix"])
def test_keys_one_ulp_apart(emulator, rng, kernel):
    """Four adjacent floats, shuffled: after a cut the entry bar is exactly one key above the
    k-th, so a later key one ulp higher must still get in and a tie must not."""
    n, k = 100000, 3000
    ladder = np.nextafter(np.float32(1.0), np.float32(2.0), dtype=np.float32)
    values = np.array([1.0, ladder, np.nextafter(ladder, np.float32(2.0)), 0.5], np.float32)
    s = values[rng.integers(0, 4, (2, n))]
    check(emulator, kernel, s, np.array([n, n - 1]), k)


@pytest.mark.parametrize("kernel", ["filter", "radix"])
def test_ragged_rows_with_starts(emulator, rng, kernel):
    rows, n, k = 9, 30000, 512
    s = make_scores(rng, rows, n, "special")
    starts = rng.integers(0, n, rows)
    starts[:3] = [0, n - 1, 3]
    lens = np.array([rng.integers(0, n - st + 1) for st in starts])
    lens[:3] = [n, 1, 0]
    check(emulator, kernel, s, lens, k, starts=starts)


@pytest.mark.parametrize("kernel", ["filter", "radix"])
@pytest.mark.parametrize("kind", ["random", "ties", "special"])
def test_candidate_blocks_equal_reference(emulator, rng, kernel, kind):
    rows, nb, c, b = 9, 16384, 2048, 8
    bs = make_scores(rng, rows, nb, kind)
    lens = np.minimum([0, 1, 8, 9, c * b - 1, c * b, c * b + 1, nb * b, 77777], nb * b)
    status, got = launch(emulator, kernel, bs, lens, c, block_size=b, mode=1)
    assert status == 0 and not (got == UNWRITTEN).any()
    want = dj.select_candidate_blocks(
        jnp.asarray(bs),
        jnp.asarray(lens, jnp.int32),
        num_candidates=c,
        block_size=b,
        implementation="reference",
    )
    np.testing.assert_array_equal(got, np.asarray(want))


def test_radix_candidate_mask_and_filter_declines_it(emulator, rng):
    rows, n, k, c, b = 5, 20000, 512, 2048, 8
    s = make_scores(rng, rows, n, "special")
    lens = np.array([n, 0, 9, 4000, 19999])
    blocks = np.full((rows, c), dj.INT32_MAX, np.int32)
    for r in range(rows):
        nb = -(-int(lens[r]) // b)
        pick = np.sort(rng.choice(max(nb, 1), size=min(c, nb), replace=False)) if nb else []
        blocks[r, : len(pick)] = pick
    check(emulator, "radix", s, lens, k, members=blocks)
    status, _ = launch(emulator, "filter", s, lens, k, members=blocks)
    assert status != 0, "the filter kernel takes no candidate mask: it must refuse one"
