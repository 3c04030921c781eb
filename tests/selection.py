"""Every implementation of the selection ops (topk, select_candidate_blocks) behind one runner, so
each op has one test file parametrised over all of them:

- reference: the pure-jnp oracle-checked path (the baseline every other one must equal);
- emulated-pallas: the Pallas Mosaic GPU select's SIMT program on the CPU emulator
  (`dsv41_jax._simt`: bounds, initialisation and race checks);
- emulated-cluster / emulated-filter / emulated-short: the CUDA kernels' own source on the CPU
  (tests/simt/; also the on-chip select of the SM90 sparse consumer, `emulate_onchip`);
- ffi (the public dispatch) / ffi-cluster / ffi-filter / ffi-filter-clusters (no split rows) /
  ffi-short / pallas: the kernels on the GPU (device machine; marked `gpu`).

An implementation declares what it takes (size budget, tile multiple, ragged starts, candidate
mask, dtype), and `params` yields only the (implementation, case) pairs it can run, so nothing
is collected just to be skipped.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pathlib
import shutil
import subprocess
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import POISON, poison_device_memory

import dsv41_jax as dj
from dsv41_jax.topk import ffi as topk_ffi
from dsv41_jax.topk import pallas_mgpu as topk_pallas

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIMT = ROOT / "tests" / "simt"
UNWRITTEN = 0x7EADBEEF  # what tests/simt/main.cc fills the outputs with before a launch


@dataclasses.dataclass(frozen=True)
class Case:
    """One selection input: `rows` rows of `n` scores of a `kind` (benchmarks.inputs.scores)."""

    rows: int
    n: int
    k: int
    kind: str = "random"
    starts: bool = False  # ragged prefill rows
    mask: int = 0  # candidate blocks per row of a candidate-block mask (topk only)
    messy: bool = False  # the mask's ids shuffled, repeated and partly out of range
    block_size: int = 8
    dtype: str = "float32"

    @property
    def id(self) -> str:
        extra = "-starts" if self.starts else ""
        if self.mask:
            extra += f"-mask{self.mask}b{self.block_size}" + ("messy" if self.messy else "")
        dt = "" if self.dtype == "float32" else f"-{self.dtype}"
        return f"{self.kind}-{self.rows}x{self.n}-k{self.k}{extra}{dt}"


@dataclasses.dataclass(frozen=True)
class Impl:
    name: str
    on_gpu: bool
    max_elems: int  # rows * n it runs in reasonable time
    tile: int = 1  # n must be a multiple of it
    starts: bool = True
    mask: bool = True
    dtypes: tuple[str, ...] = ("float32",)
    max_k: int = 1 << 30
    max_n: int = 1 << 30  # widest row
    long_k: int = 1 << 30  # the largest k for rows over 16,384 columns
    bf16_tile: int = 1  # bfloat16 rows must be a multiple of it

    def takes(self, case: Case) -> bool:
        return (
            case.rows * case.n <= self.max_elems
            and case.n <= self.max_n
            and case.n % self.tile == 0
            and (self.starts or not case.starts)
            and (self.mask or not case.mask)
            and case.dtype in self.dtypes
            and case.k <= (self.max_k if case.n <= 16384 else min(self.max_k, self.long_k))
            and (case.dtype != "bfloat16" or case.n % self.bf16_tile == 0)
        )


BF16 = ("float32", "bfloat16")
SHORT_MAX_N = 8 * 16384  # cuda/smxx_short_topk.cuh: kShortMaxCluster * kShortChunk
# dsv41_jax/topk/mgpu_select.py: MAX_K, MAX_K_LONG; bf16 rows in whole 16-byte vectors.
PALLAS_LIMITS = dict(max_k=16384, long_k=4096, bf16_tile=8)
IMPLS = {
    i.name: i
    for i in (
        Impl("emulated-pallas", False, 300_000, dtypes=BF16, **PALLAS_LIMITS),
        Impl("emulated-cluster", False, 300_000, dtypes=BF16),
        Impl("emulated-filter", False, 300_000, dtypes=BF16, max_k=4096),
        Impl("emulated-short", False, 300_000, dtypes=BF16, max_n=SHORT_MAX_N),
        Impl("ffi", True, 1 << 23, dtypes=BF16),
        Impl("ffi-cluster", True, 1 << 23, dtypes=BF16),
        Impl("ffi-filter", True, 1 << 23, dtypes=BF16, max_k=4096),
        Impl("ffi-filter-clusters", True, 1 << 23, dtypes=BF16, max_k=4096),
        Impl("ffi-short", True, 1 << 23, dtypes=BF16, max_n=SHORT_MAX_N),
        Impl("pallas", True, 1 << 23, dtypes=BF16, **PALLAS_LIMITS),
    )
}


def params(cases: Iterable[Case], impls: Iterable[str] = IMPLS) -> list:
    """pytest params of every (implementation, case) pair the implementation takes."""
    out = []
    for name in impls:
        impl = IMPLS[name]
        marks = (pytest.mark.gpu,) if impl.on_gpu else ()
        out += [
            pytest.param(impl, c, id=f"{impl.name}-{c.id}", marks=marks)
            for c in cases
            if impl.takes(c)
        ]
    return out


def impl_params(case: Case, impls: Iterable[str] = IMPLS) -> list:
    """pytest params of the implementations that take `case` (for tests that build their own
    inputs of that shape)."""
    return [
        pytest.param(p.values[0], id=p.values[0].name, marks=p.marks) for p in params([case], impls)
    ]


def lengths(rng, rows: int, n: int, k: int) -> np.ndarray:
    """Per-row lengths: the whole row first, then the edges (n - 1, 0, 1, 7, 8, 9, k - 1, k,
    k + 1), then random."""
    edges = [x for x in (n, n - 1, 0, 1, 7, 8, 9, k - 1, k, k + 1) if 0 <= x <= n]
    return np.array(
        [edges[i] if i < len(edges) else rng.integers(0, n + 1) for i in range(rows)], np.int32
    )


def candidate_mask(rng, lens, c: int, block_size: int, messy: bool = False) -> np.ndarray:
    """Each row's candidate table: up to `c` random blocks of the row, ascending, INT32_MAX
    padded; `messy`: shuffled, with repeats, -1 and ids past the row (membership is what
    counts)."""
    blocks = np.full((len(lens), c), dj.INT32_MAX, np.int32)
    for r, length in enumerate(lens):
        nb = -(-int(length) // block_size)
        pick = np.sort(rng.choice(max(nb, 1), size=min(c, nb), replace=False)) if nb else []
        blocks[r, : len(pick)] = pick
        if messy and c >= 4:
            blocks[r, -3:] = [-1, nb + 5, blocks[r, 0]]
            rng.shuffle(blocks[r])
    return blocks


def case_inputs(rng, case: Case, make_scores: Callable) -> dict:
    """The arrays of a topk case: scores, lengths (per-row starts and mask when asked)."""
    s = make_scores(rng, case.rows, case.n, case.kind)
    inputs = {"scores": s.astype(jnp.bfloat16) if case.dtype == "bfloat16" else s}
    if case.starts:
        starts = rng.integers(0, case.n, case.rows).astype(np.int32)
        starts[:2] = [0, case.n - 1][: case.rows]
        inputs["starts"] = starts
        inputs["lens"] = np.array([rng.integers(0, case.n - st + 1) for st in starts], np.int32)
        inputs["lens"][0] = case.n
    else:
        inputs["lens"] = lengths(rng, case.rows, case.n, case.k)
    if case.mask:
        inputs["candidates"] = candidate_mask(
            rng, inputs["lens"], case.mask, case.block_size, case.messy
        )
    return inputs


# ---------------------------------------------------------------------------- the CPU stand-in
SIMT_SOURCES = (
    "main.cc",
    "filter_topk.cc",
    "cluster_topk.cc",
    "short_topk.cc",
    "sort_blocks.cc",
    "page_kernels.cc",
    "ragged_rows.cc",
    "onchip_select.cc",
)


def filter_row(rng, kind: str, n: int, k: int, chunks: int) -> np.ndarray:
    """A row of n keys for the filter select's chunked and split paths: keys ascending with
    position ("ascending"); a plateau of 3500 ties in each of `chunks` equal chunks above the
    rest ("plateau": every chunk's buffer past the bar holds them); 3k ties at the k-th key
    ("ties"); spread random keys (any other kind)."""
    if kind == "ascending":
        return np.sort(rng.standard_normal(n)).astype(np.float32)
    if kind == "plateau":
        row = (rng.standard_normal(n) * 0.1 - 2.0).astype(np.float32)
        mine = n // chunks
        for c in range(chunks):
            row[c * mine + rng.choice(mine, 3500, replace=False)] = 1.0
        return row
    row = rng.standard_normal(n).astype(np.float32)
    if kind == "ties":
        row[rng.choice(n, 3 * k, replace=False)] = 9.0
    return row


# Rows that stop the three-pass selects (the short-row and on-chip ones: digits of 11, 11 and 10
# bits) at a chosen pass.
BASE = 0x3F800000  # 1.0f: the low 23 bits clear, so + (a << 21 | b << 10 | c) sets the digits


def digit_row(rng, n: int, k: int, stop: int) -> np.ndarray:
    """A row whose k-th key the select finds at a chosen step: `stop` 0 / 1 when the bin of pass
    0 / 1 holds exactly the keys still needed; 2 with ties at the k-th key and fewer of them
    needed; 3 when the pass-2 bin of the k-th key holds exactly the keys still needed. Keys'
    digits a (pass 0, top 11 bits), b (pass 1) and c (pass 2) over 1.0's bits, columns shuffled."""
    above = int(rng.integers(0, k))  # keys in bins above the k-th key's (a = 3)
    rest = k - above
    a = rng.integers(0, 2, n)  # the keys below
    b = rng.integers(0, 1 << 11, n)
    c = rng.integers(0, 1 << 10, n)
    a[:above] = 3
    group = slice(above, above + rest)
    a[group] = 2
    if stop == 0:
        b[above], c[above] = 0, 0  # the lowest key of the k-th key's pass-0 bin
    if stop >= 1:
        b[group] = 7
        c[above] = 0  # the lowest key of its pass-1 bin
        a[above + rest : above + rest + 5] = 2  # in the k-th key's pass-0 bin, below its pass-1 bin
        b[above + rest : above + rest + 5] = rng.integers(0, 7, 5)
    if stop >= 2:
        split = int(rng.integers(0, rest))  # keys above the k-th one in its pass-1 bin
        c[above : above + split] = rng.integers(10, 1 << 10, split)
        ties = rest - split + (int(rng.integers(1, 40)) if stop == 2 else 0)
        lo = above + split
        a[lo : lo + ties], b[lo : lo + ties], c[lo : lo + ties] = 2, 7, 9
        below = lo + max(ties, rest - split)  # same pass-1 bin, below the k-th key's pass-2 bin
        a[below : below + 6], b[below : below + 6] = 2, 7
        c[below : below + 6] = rng.integers(0, 9, 6)
    bits = (BASE + (a << 21 | b << 10 | c)).astype(np.uint32)
    return rng.permutation(bits.view(np.float32))


def build_emulator(
    directory: pathlib.Path,
    include: pathlib.Path | None = None,
    base: pathlib.Path | None = None,
    rebuild: Iterable[str] = (),
) -> pathlib.Path:
    """Compiles tests/simt/ with the kernels' source (the top-k selects, the candidate-table
    sort, the page kernels, the on-chip select), one object a source in parallel; skips without
    g++.

    A variant (a mutant test): `include`, searched before cuda/, holds edited copies of kernel
    headers; with `base`, an earlier build's folder, only the sources named in `rebuild` are
    compiled again and the others' objects are linked from there."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("needs g++ to build the SIMT stand-in")
    exe = directory / "kernels_emu"
    first = [f"-I{include}"] if include is not None else []
    flags = ["-std=c++20", "-O2", "-fno-extern-tls-init", *first, f"-I{SIMT}", f"-I{ROOT / 'cuda'}"]
    # AddressSanitizer: the kernels' global loads and stores hit exact-size host buffers, so a
    # read or write past any of them aborts the run (where the toolchain has libasan).
    asan = ["-fsanitize=address", "-fno-omit-frame-pointer"]
    rebuild = set(rebuild)
    for extra in (asan, []):
        if base is not None and (base / "asan").exists() != bool(extra):
            continue  # the objects reused were built the other way
        objects, commands = [], []
        for name in SIMT_SOURCES:
            obj = directory / name.replace(".cc", ".o")
            if base is not None and name not in rebuild:
                obj = base / obj.name
            else:
                commands.append([cxx, *flags, *extra, "-c", str(SIMT / name), "-o", str(obj)])
            objects.append(str(obj))
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            done = list(pool.map(lambda c: subprocess.run(c, capture_output=True), commands))
        if all(d.returncode == 0 for d in done):
            linked = [cxx, *extra, "-o", str(exe), *objects, "-lpthread"]
            done.append(subprocess.run(linked, capture_output=True))
        if all(d.returncode == 0 for d in done):
            (directory / "asan").unlink(missing_ok=True)
            if extra:
                (directory / "asan").touch()
            return exe
    errors = "\n".join(d.stderr.decode() for d in done if d.returncode != 0)
    raise RuntimeError(f"building the SIMT stand-in failed:\n{errors}")


def build_mutant(
    base: pathlib.Path, work: pathlib.Path, source: pathlib.Path, old: str, new: str, rebuild: str
) -> pathlib.Path:
    """A stand-in whose kernel file `source` (of cuda/) has `old` (there once) replaced by `new`:
    an include folder searched before cuda/ holds a copy of cuda/ with that edit, so the edited
    file shadows cuda/'s wherever it is included from (a header too: quoted includes look in
    the including file's folder first), where the stand-in's source `rebuild` is compiled
    again; the other objects are `base`'s."""
    text = source.read_text()
    assert text.count(old) == 1, f"{source.name} changed: {old!r} is not there once"
    shutil.copytree(ROOT / "cuda", work / "include")
    (work / "include" / source.name).write_text(text.replace(old, new))
    return build_emulator(work, work / "include", base, rebuild=(rebuild,))


def assert_mutants_caught(exe, rng, tmp_path, source, mutants, rebuild, check) -> None:
    """Each of `mutants` ((name, old, new) edits of `source`, a file of cuda/: an edited copy
    shadowing cuda/ where only the stand-in's source `rebuild` is compiled again) fails
    `check(mutant, seed)`, which the unedited build `exe` passes first (`seed`: the first draw
    of `rng`, so every build sees the same rows)."""
    seed = int(rng.integers(1 << 30))
    base = pathlib.Path(exe).parent
    check(exe, seed)

    def build(m):
        return build_mutant(base, tmp_path / m[0], source, m[1], m[2], rebuild)

    def caught(mutant_exe) -> bool:
        try:
            check(mutant_exe, seed)
        except AssertionError:
            return True
        return False

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        builds = list(pool.map(build, mutants))
    survived = [m[0] for m, b in zip(mutants, builds) if not caught(b)]
    assert not survived, f"mutants not caught: {survived}"


def _run(exe, *args, env_extra: dict[str, str] | None = None) -> None:
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}  # fibers' stacks confuse the leak check
    env.update(env_extra or {})
    done = subprocess.run([str(exe), *args], capture_output=True, timeout=600, env=env)
    err = done.stderr.decode()
    errors = "\n".join(line for line in err.splitlines() if "makecontext/swapcontext" not in line)
    assert done.returncode == 0, f"the stand-in failed ({done.returncode}):\n{errors[-4000:]}"


def _launch(exe, command: str, header, arrays, env_extra=None) -> tuple[int, np.ndarray]:
    """Writes a case file (int64 `header`, then each array's bytes), runs `command` of
    tests/simt/main.cc on it, and returns (cudaError, the output's bytes after it)."""
    work = pathlib.Path(exe).parent
    case, out = work / f"case_{command}", work / f"out_{command}"
    with open(case, "wb") as f:
        np.array(header, np.int64).tofile(f)
        for a in arrays:
            np.ascontiguousarray(a).tofile(f)
    _run(exe, command, str(case), str(out), env_extra=env_extra)
    raw = np.fromfile(out, np.uint8)
    return int(raw[:4].view(np.int32)[0]), raw[4:]


def emulate(
    exe, kernel, scores, lens, k, starts=None, members=None, block_size=8, mode=0, syncs=None
):
    """Runs the select `kernel` ("cluster", "filter" or "short": LaunchClusterTopk, ...) on the
    CPU stand-in; returns (cudaError, out). `syncs` (a list): each cluster's most cluster.syncs
    passed by one of its CTAs is appended to it, in launch order (a row's cluster, for the short
    select)."""
    scores = np.asarray(scores)
    rows, n = scores.shape
    bf16 = scores.dtype == jnp.bfloat16
    m = 0 if members is None else members.shape[1]
    header = [rows, n, k, block_size, mode, starts is not None, members is not None, m, bf16]
    arrays = [
        scores if bf16 else scores.astype(np.float32),
        np.asarray(lens, np.int32),
        np.asarray(np.zeros(rows) if starts is None else starts, np.int32),
    ]
    if members is not None:
        arrays.append(np.asarray(members, np.int32))
    record = pathlib.Path(exe).parent / f"syncs_{kernel}"
    record.unlink(missing_ok=True)
    env = None if syncs is None else {"EMU_CLUSTER_SYNCS": str(record)}
    status, out = _launch(exe, kernel, header, arrays, env)
    if syncs is not None:
        syncs += [int(x) for x in record.read_text().split()] if record.exists() else []
    return status, out.view(np.int32).reshape(rows, k)


def assert_written(status: int, got, what: str = "") -> None:
    """A launch of the stand-in returned no error and wrote every output element (main.cc fills
    them with UNWRITTEN first); `what` prefixes the failure."""
    assert status == 0, f"{what}launch error {status}"
    assert not (got == UNWRITTEN).any(), f"{what}an output element was never written"


def assert_rows_equal(status: int, got, want, what: str = "") -> None:
    """`assert_written`, and each row of `got` equals the same row of `want` (`what` names the
    rows in a failure)."""
    assert_written(status, got)
    assert len(want) == len(got), f"{what}: {len(got)} rows, {len(want)} expected"
    for r in range(len(got)):
        np.testing.assert_array_equal(got[r], want[r], err_msg=f"{what} row {r}")


def oracle_rows(scores, lens, k: int, starts=None) -> list[np.ndarray]:
    """Each row's `oracle.topk_row` of k: its scores from `starts[r]` (0 where None; both the
    start and the length clamped to the row, as the selects clamp them), at full precision."""
    out = []
    for r, row in enumerate(np.asarray(scores, np.float32)):
        start = 0 if starts is None else min(max(int(starts[r]), 0), row.shape[0])
        length = min(max(int(lens[r]), 0), row.shape[0] - start)
        out.append(oracle.topk_row(row[start:], length, k))
    return out


def emulate_equals_oracle(exe, kernel, scores, lens, k, what: str = "", syncs=None) -> None:
    """Runs the select `kernel` (as `emulate`, `syncs` too) and asserts that it launched, wrote
    every output element and selected each row's `oracle.topk_row` (of the rows at full
    precision: bf16 rows compare as their float32 values)."""
    status, got = emulate(exe, kernel, scores, lens, k, syncs=syncs)
    assert_rows_equal(status, got, oracle_rows(scores, lens, k), what)


def bf16_rows_equal_the_oracle(exe, rng, n: int, k: int) -> None:
    """Runs the short select on two bf16 rows of n normal scores (many ties), the second 9
    shorter, against the oracle."""
    bf = rng.standard_normal((2, n)).astype(jnp.bfloat16)
    emulate_equals_oracle(exe, "short", bf, np.asarray([n, n - 9], np.int32), k, "bf16")


def candidate_rows_equal_the_oracle(exe, rng, n: int, c: int) -> None:
    """Runs the short select on rows of n candidate blocks (mode 1, c kept) against the oracle:
    the newest block pinned, NaN and -inf blocks lowest (and taken where fewer than c blocks are
    left: rows 1 and 2), all blocks tied (row 3), lengths in positions (blocks of 8) ending
    inside a block, at a block's end and inside the first block."""
    scores = rng.standard_normal((5, n)).astype(np.float32)
    scores[1, 10:60] = np.nan
    scores[2, 5:30] = -np.inf
    scores[3] = 1.0  # all tied: the lowest blocks and the newest
    lens = np.asarray([n * 8 - 3, 8 * 200 + 1, 8 * 150, n * 8, 5], np.int32)
    status, got = emulate(exe, "short", scores, lens, c, mode=1)
    want = [oracle.candidate_row(s, int(length), c, 8) for s, length in zip(scores, lens)]
    assert_rows_equal(status, got, want, "candidate")


def table_fields(out: np.ndarray, rows: int, c: int):
    """A candidate table as tests/simt/main.cc writes it (blocks [rows, c], count, valid_lens,
    physical [rows, c]) from the start of `out`'s bytes; returns (those four, the int32 after)."""
    blocks, count, valid, physical, rest = np.split(
        out.view(np.int32), np.cumsum([rows * c, rows, rows, rows * c])
    )
    return (blocks.reshape(rows, c), count, valid, physical.reshape(rows, c)), rest


def emulate_sort(exe, selected, lens, block_table, block_size, page_size, c=None):
    """Runs LaunchSortCandidateBlocks on the CPU stand-in; returns (cudaError, CandidateTable
    fields as numpy arrays: blocks, count, valid_lens, physical). `selected` None: the sort of
    every block (no ids) into tables of `c` blocks."""
    table, lens = np.asarray(block_table, np.int32), np.asarray(lens, np.int32)
    rows = len(lens)
    if selected is None:
        command, arrays = "sort-every", [lens, table]
    else:
        selected = np.asarray(selected, np.int32)
        command, arrays, c = "sort", [selected, lens, table], selected.shape[1]
    header = [rows, c, table.shape[1], block_size, page_size]
    status, out = _launch(exe, command, header, arrays)
    return status, table_fields(out, rows, c)[0]


def emulate_page_kernel(exe, kernel, header, arrays, out_dtype, out_shape):
    """Runs one of the small kernels (tests/simt/main.cc: "l2p", "ragged", "amax", "cols")
    on the CPU stand-in: `header` up to 8 ints, then `arrays` in order; returns the output
    bytes viewed as `out_dtype` in `out_shape`."""
    status, out = _launch(exe, kernel, list(header) + [0] * (8 - len(header)), arrays)
    assert status == 0
    return out.view(out_dtype).reshape(out_shape)


def emulate_onchip(exe, scores, lens, k, blocks, cl):
    """Runs the on-chip select (cuda/smxx_onchip_select.cuh behind tests/simt/onchip_select.cc)
    on the CPU stand-in, a row a cluster of `cl` CTAs; `blocks` [rows, >= ceil(n / 8)] is each
    row's candidate-block table. Returns (cudaError, out [rows, k])."""
    scores = np.asarray(scores, np.float32)
    rows, n = scores.shape
    blocks = np.asarray(blocks, np.int32)
    header = [rows, n, k, 8, 0, False, True, blocks.shape[1], False]
    arrays = [scores, np.asarray(lens, np.int32), np.zeros(rows, np.int32), blocks]
    status, out = _launch(exe, f"onchip:{cl}", header, arrays)
    return status, out.view(np.int32).reshape(rows, k)


def onchip_reference(scores, lens, k, blocks, block_size=8) -> np.ndarray:
    """What the on-chip select returns: each row's top-k of scores[:len] by the contract
    (oracle.topk_row: NaN and -inf never, larger first, ties by lower column, ascending column
    order, -1 padded), column j written as position blocks[j // block_size] * block_size +
    j % block_size."""
    out = np.full((len(scores), k), -1, np.int32)
    for r, row in enumerate(np.asarray(scores)):
        length = min(max(int(lens[r]), 0), row.shape[0])
        cols = np.array([c for c in oracle.topk_row(row, length, k) if c >= 0], np.int64)
        out[r, : len(cols)] = blocks[r][cols // block_size] * block_size + cols % block_size
    return out


# ---------------------------------------------------------------------------------- the runners
# One CUDA select forced: (algorithm, split). ffi-filter-clusters keeps the filter select's rows
# in clusters where it would split them.
FORCED = {
    "ffi-cluster": ("cluster", True),
    "ffi-filter": ("filter", True),
    "ffi-filter-clusters": ("filter", False),
    "ffi-short": ("short", True),
}


def _device_run(fn, *args):
    """A GPU implementation under jit, on poisoned memory; fails if an output was not written."""
    poison_device_memory()
    got = np.asarray(jax.jit(fn)(*args))
    assert not (got == POISON).any(), "an output element was never written"
    return got


def run_topk(impl: Impl, request, scores, lens, k, starts=None, candidates=None, block_size=8):
    """`dj.topk` semantics through implementation `impl`, as a numpy array."""
    s, n = jnp.asarray(scores), jnp.asarray(lens, jnp.int32)
    st = None if starts is None else jnp.asarray(starts, jnp.int32)
    cand = None if candidates is None else jnp.asarray(candidates, jnp.int32)
    if impl.name == "emulated-pallas":
        return np.asarray(topk_pallas.topk(s, n, k, st, cand, block_size, emulate=True))
    if impl.name.startswith("emulated"):
        exe = request.getfixturevalue("simt_topk")
        kernel = impl.name.removeprefix("emulated-")
        status, got = emulate(exe, kernel, scores, lens, k, starts, candidates, block_size)
        assert_written(status, got, f"{impl.name}: ")
        return got
    if impl.name in FORCED:  # one CUDA select, whatever the dispatch would pick
        algorithm, split = FORCED[impl.name]
        return _device_run(
            lambda s, n, st, c: topk_ffi.cuda_topk(
                s, n, k, st, c, block_size, "positions", algorithm, split
            ),
            s,
            n,
            st,
            cand,
        )
    return _device_run(
        lambda s, n, st, c: dj.topk(
            s, n, k, starts=st, candidates=c, block_size=block_size, implementation=impl.name
        ),
        s,
        n,
        st,
        cand,
    )


def run_candidate_blocks(impl: Impl, request, block_scores, lens, c, block_size=8):
    """`dj.select_candidate_blocks` semantics through implementation `impl`."""
    bs, n = jnp.asarray(block_scores), jnp.asarray(lens, jnp.int32)
    if impl.name == "emulated-pallas":
        return np.asarray(topk_pallas.select_candidate_blocks(bs, n, c, block_size, emulate=True))
    if impl.name.startswith("emulated"):
        exe = request.getfixturevalue("simt_topk")
        kernel = impl.name.removeprefix("emulated-")
        status, got = emulate(exe, kernel, block_scores, lens, c, block_size=block_size, mode=1)
        assert_written(status, got, f"{impl.name}: ")
        return got
    if impl.name in FORCED:
        return _device_run(
            lambda b, n: topk_ffi.cuda_topk(
                b, n, c, None, None, block_size, "candidate_blocks", *FORCED[impl.name]
            ),
            bs,
            n,
        )
    return _device_run(
        lambda b, n: dj.select_candidate_blocks(
            b, n, num_candidates=c, block_size=block_size, implementation=impl.name
        ),
        bs,
        n,
    )
