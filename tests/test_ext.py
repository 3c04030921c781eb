"""The CUDA extension: built wherever nvcc is, registers its FFI targets, lowers for CUDA."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from devices import SM100

import dsv41_jax
from dsv41_jax import _ext

needs_ext = pytest.mark.skipif(
    not _ext.available(),
    reason="the CUDA extension is not built (installed without nvcc >= 12.9, or with "
    "DSV41_BUILD_CUDA=OFF)",
)


def test_extension_is_built_where_nvcc_is():
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc on this machine: a pure-Python install is expected")
    if os.environ.get("DSV41_BUILD_CUDA", "").lower() in ("off", "0", "false", "no", "n", "f"):
        pytest.skip("DSV41_BUILD_CUDA=OFF (make CUDA=0): a pure-Python install is expected")
    assert _ext.available(), _ext._load()


def test_missing_extension_error_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(_ext, "_load", lambda: "the dsv41_jax CUDA extension is not installed")
    with pytest.raises(_ext.ExtensionUnavailable, match="extension is not installed"):
        _ext.extension()
    with pytest.raises(NotImplementedError):
        _ext.require_gpu("some_op")


def test_missing_extension_message_says_when_it_is_built_and_how():
    """Not built: both conditions (nvcc >= 12.9 at install time, the switch not OFF) and a build
    command whose tools are exactly the build requirements the environment lacks."""
    import tomllib

    missing = ModuleNotFoundError(f"No module named '{_ext.EXTENSION}'", name=_ext.EXTENSION)
    text = _ext._missing_message(missing)
    assert "is not installed" in text and "nvcc (CUDA >= 12.9) is on PATH" in text
    assert "DSV41_BUILD_CUDA is not OFF" in text and "`make install`" in text
    assert _ext.BUILD_COMMAND in text and "--no-build-isolation" in _ext.BUILD_COMMAND
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    runtime = {re.split(r"[=<>\[]", r)[0] for r in pyproject["project"]["dependencies"]}
    for req in pyproject["build-system"]["requires"]:
        name = re.split(r"[=<>]", req)[0]
        assert name in runtime or f"'{req}'" in _ext.BUILD_COMMAND or req in _ext.BUILD_COMMAND
    # Built, but the loader refuses it (e.g. another jaxlib): no claim that it was not built.
    broken = _ext._missing_message(ImportError("undefined symbol: XlaFfi"))
    assert "installed but failed to load: undefined symbol" in broken and "nvcc" not in broken


@needs_ext
def test_every_handler_registers_for_cuda():
    names = _ext.register_targets()
    assert "dsv41_logical_to_physical" in names
    assert all(name.startswith("dsv41_") for name in names)


@needs_ext
def test_ffi_targets_doc_lists_exactly_the_registered_targets():
    doc = (Path(__file__).parents[1] / "docs" / "ffi_targets.md").read_text()
    documented = set(re.findall(r"^### `(dsv41_\w+)`", doc, flags=re.MULTILINE))
    assert documented == set(_ext.extension().registrations())
    assert set(dsv41_jax.register_ffi_targets()) == documented


@needs_ext
def test_ffi_call_lowers_to_a_cuda_custom_call():
    _ext.register_targets()

    def f(i, bt):
        out = jax.ShapeDtypeStruct(i.shape, jnp.int32)
        return jax.ffi.ffi_call("dsv41_logical_to_physical", out)(i, bt, page_size=np.int32(64))

    args = (jnp.zeros((4, 8), jnp.int32), jnp.zeros((4, 3), jnp.int32))
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.custom_call @dsv41_logical_to_physical" in text


@needs_ext
def test_sm100_sparse_call_lowers_and_declines_elsewhere(simulate):
    """The SM100 kernel never ran here (no Blackwell machine): check the call it would make."""
    import dsv41_jax as dj
    from dsv41_jax.logits import ffi as logits_ffi

    rng = np.random.default_rng(0)
    rows = 4
    q = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((rows, 1, 32, 128)), jnp.float32),
        jnp.ones((rows, 1, 32), jnp.float32),
        "mxfp4",
    )
    cache = dj.PagedIndexCache.zeros(8, 64, 128, "mxfp4")
    table = dj.CandidateTable(
        jnp.zeros((rows, 2048), jnp.int32),
        jnp.zeros(rows, jnp.int32),
        jnp.zeros(rows, jnp.int32),
        jnp.zeros((rows, 2048), jnp.int32),
        block_size=8,
    )
    bt = jnp.zeros((rows, 8), jnp.int32)
    args = (q, cache, table, jnp.zeros(rows, jnp.int32), bt, 8)
    with pytest.raises(NotImplementedError):
        logits_ffi.sparse_paged_mqa_logits(*args)  # no GPU here / not an SM100 GPU
    simulate(SM100)
    lowered = (
        jax.jit(lambda *a: logits_ffi.sparse_paged_mqa_logits(*a, 8))
        .trace(*args[:5])
        .lower(lowering_platforms=("cuda",))
    )
    assert "custom_call @dsv41_sm100_paged_sparse_mqa_logits" in lowered.as_text()


@needs_ext
def test_sm100_dense_call_lowers_with_row_tables(simulate):
    """The SM100 dense paged logits (compile-verified only): on an SM100 device the FFI path calls
    its kernel with per-row lengths and page tables and widens the bf16 logits to float32."""
    import dsv41_jax as dj
    from dsv41_jax.logits import ffi as logits_ffi

    rng = np.random.default_rng(0)
    q = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((3, 2, 32, 128)), jnp.float32),
        jnp.ones((3, 2, 32), jnp.float32),
        "mxfp4",
    )
    cache = dj.PagedIndexCache.zeros(12, 64, 128, "mxfp4")
    bt = jnp.zeros((3, 4), jnp.int32)
    lens = jnp.array([5, 200, 256], jnp.int32)
    simulate(SM100)
    f = jax.jit(lambda *a: logits_ffi.paged_mqa_logits(*a, 256))
    lowered = f.trace(q, cache, lens, bt).lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert "custom_call @dsv41_sm100_paged_mqa_logits" in text
    assert "tensor<6x384xbf16>" in text  # rows = batch x next_n; width: whole 384-position splits
    out = jax.eval_shape(f, q, cache, lens, bt)
    assert out.shape == (6, 256) and out.dtype == jnp.float32
    q8 = dj.quantize_queries(jnp.ones((3, 2, 32, 128), jnp.float32), q.weights)
    with pytest.raises(NotImplementedError, match="mxfp4"):  # SM100 has no fp8 dense kernel here
        logits_ffi.paged_mqa_logits(q8, dj.PagedIndexCache.zeros(12, 64, 128), lens, bt, 256)


@needs_ext
@pytest.mark.parametrize("sm100", [False, True])
def test_ragged_logits_call_lowers_per_architecture(simulate, sm100):
    """The prefill logits kernel of each architecture (SM100's is compile-verified only): its
    custom call, the relative layout widened to float32, and the decline for the other format."""
    import dsv41_jax as dj
    from dsv41_jax.logits import ffi as logits_ffi

    fmt = "mxfp4" if sm100 else "fp8"
    rng = np.random.default_rng(0)
    q = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((5, 1, 32, 128)), jnp.float32), jnp.ones((5, 1, 32)), fmt
    )
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((300, 128)), jnp.float32), fmt)
    s, e = jnp.zeros(5, jnp.int32), jnp.arange(1, 6, dtype=jnp.int32)
    simulate(SM100 if sm100 else _ext.H200)
    f = jax.jit(lambda *a: logits_ffi.mqa_logits(*a, True))
    text = f.trace(q, keys, s, e).lower(lowering_platforms=("cuda",)).as_text()
    target = "dsv41_sm100_mqa_logits" if sm100 else "dsv41_sm90_mqa_logits"
    assert f"custom_call @{target}" in text
    assert jax.eval_shape(f, q, keys, s, e).dtype == jnp.float32
    other = "fp8" if sm100 else "mxfp4"
    q2 = dj.quantize_queries(jnp.ones((5, 1, 32, 128)), jnp.ones((5, 1, 32)), other)
    k2 = dj.quantize_keys(jnp.ones((300, 128)), other)
    with pytest.raises(NotImplementedError, match=f"needs {fmt} keys"):
        logits_ffi.mqa_logits(q2, k2, s, e, True)


@needs_ext
def test_sm90_sparse_call_lowers_to_one_kernel_over_the_paged_cache(simulate):
    """The Hopper sparse path: one custom call scoring the candidate blocks in the paged cache
    (no gather, no compact cache), one query row per table row (next_n 2 rows are 2 rows)."""
    import dsv41_jax as dj
    from dsv41_jax.logits import ffi as logits_ffi

    rng = np.random.default_rng(0)
    batch, next_n, c = 3, 2, 64
    q = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((batch, next_n, 32, 128)), jnp.float32),
        jnp.ones((batch, next_n, 32), jnp.float32),
    )
    rows = batch * next_n
    cache = dj.PagedIndexCache.zeros(8, 64, 128)
    table = dj.CandidateTable(
        jnp.zeros((rows, c), jnp.int32),
        jnp.zeros(rows, jnp.int32),
        jnp.zeros(rows, jnp.int32),
        jnp.zeros((rows, c), jnp.int32),
        block_size=8,
    )
    simulate(_ext.H200)
    lowered = (
        jax.jit(
            lambda q, cache, table: logits_ffi.sparse_paged_mqa_logits(
                q, cache, table, None, None, 8
            )
        )
        .trace(q, cache, table)
        .lower(lowering_platforms=("cuda",))
    )
    text = lowered.as_text()
    assert text.count("custom_call @") == 1, text
    assert "custom_call @dsv41_sm90_sparse_logits" in text
    assert f"-> tensor<{rows}x{c * 8}xf32>" in text
    for bad, match in (
        (dict(block_size=16), "blocks of 8"),
        (dict(c=36), "multiple of 8"),
    ):
        t = (
            table
            if "c" not in bad
            else jax.tree.map(lambda x: x[:, :36] if x.ndim == 2 else x, table)
        )
        with pytest.raises(NotImplementedError, match=match):
            logits_ffi.sparse_paged_mqa_logits_sm90(q, cache, t, bad.get("block_size", 8))


@needs_ext
def test_filter_topk_lowers_and_declines_what_it_cannot_take(simulate, monkeypatch):
    """The filter-first select lowers to its own target with the radix select's operands; k above
    the extension's limit, or a candidate mask too large for its shared memory, is declined at
    trace time."""
    from dsv41_jax.topk import ffi as topk_ffi

    simulate(_ext.H200)
    scores, lens = jnp.zeros((3, 9000), jnp.float32), jnp.array([0, 5, 9000], jnp.int32)
    starts = jnp.array([0, 1, 0], jnp.int32)

    def lowered(k, starts=None, members=None, mode="positions", split=None):
        f = jax.jit(
            lambda s, n: topk_ffi.cuda_topk(s, n, k, starts, members, 8, mode, "filter", split)
        )
        return f.trace(scores, lens).lower(lowering_platforms=("cuda",)).as_text()

    assert "custom_call @dsv41_filter_topk" in lowered(512, starts)
    # The split rows' workspace: a second result, the limit's words a row where rows may split
    # (forced: unmasked, few rows; by default where the plan's split_rows says), else one word.
    words = _ext.limit("filter_split_row_words")
    assert f"tensor<{3 * words}xui32>" in lowered(512, starts, split=True)
    assert "tensor<1xui32>" in lowered(512)  # rows the short select holds: not split
    assert "tensor<1xui32>" in lowered(512, members=jnp.zeros((3, 4), jnp.int32), split=True)
    for rows, split, want in ((8, None, 8 * words), (9, None, 1), (8, False, 1), (33, True, 1)):
        long = jax.ShapeDtypeStruct((rows, 131073), jnp.float32)
        long_lens = jax.ShapeDtypeStruct((rows,), jnp.int32)
        f = jax.jit(
            lambda s, n, split=split: topk_ffi.cuda_topk(
                s, n, 512, None, None, 8, "positions", "filter", split
            )
        )
        text = f.trace(long, long_lens).lower(lowering_platforms=("cuda",)).as_text()
        assert f"tensor<{want}xui32>" in text, (rows, split)
    assert "custom_call @dsv41_filter_topk" in lowered(2048, mode="candidate_blocks")
    max_k = _ext.limit("filter_topk_max_k")
    with pytest.raises(NotImplementedError, match=f"k = {max_k + 1} > {max_k}"):
        lowered(max_k + 1)
    # A candidate mask: lowered when its bitmap and block list fit the kernel's shared memory.
    assert "custom_call @dsv41_filter_topk" in lowered(512, members=jnp.zeros((3, 4), jnp.int32))
    need = _ext.extension().filter_topk_mask_bytes(9000, 8, 4)
    assert need == 4 * ((-(-9000 // 8) + 31) // 32 + 4)  # bitmap words + one word per member
    huge = jnp.zeros((3, 30000), jnp.int32)  # more block ids than the shared memory can list
    with pytest.raises(NotImplementedError, match="shared memory"):
        lowered(512, members=huge)
    # bfloat16 rows lower to every select, and the public path takes them.
    half = scores.astype(jnp.bfloat16)
    for algorithm in ("cluster", "filter", "short"):
        f = jax.jit(
            lambda s, n, a=algorithm: topk_ffi.cuda_topk(s, n, 64, None, None, 8, "positions", a)
        )
        text = f.trace(half, lens).lower(lowering_platforms=("cuda",)).as_text()
        assert "xbf16>" in text and f"custom_call @{topk_ffi.ALGORITHMS[algorithm]}" in text
    import dsv41_jax as dj

    f = jax.jit(lambda s, n: dj.topk(s, n, 64, implementation="ffi"))
    assert (
        "custom_call @dsv41_" in f.trace(half, lens).lower(lowering_platforms=("cuda",)).as_text()
    )


@needs_ext
def test_selects_pass_unread_operands_as_literals(simulate):
    """A call without starts or a candidate mask hands each select literal [1] and [1, 1]
    placeholders for them, never zeros of [rows] or [rows, 1] made in the program (XLA fills
    those with a kernel every call: ~2 µs beside a 5 µs select)."""
    import dsv41_jax as dj
    from dsv41_jax.topk import ffi as topk_ffi

    simulate(_ext.H200)
    scores = jax.ShapeDtypeStruct((8, 16384), jnp.float32)
    lens = jax.ShapeDtypeStruct((8,), jnp.int32)
    calls = [lambda s, n: dj.topk(s, n, 512, implementation="ffi")]
    calls += [
        lambda s, n, a=a: topk_ffi.cuda_topk(s, n, 512, None, None, 8, "positions", a)
        for a in topk_ffi.ALGORITHMS
    ]
    calls.append(
        lambda s, n: dj.select_candidate_blocks(s, n, num_candidates=256, implementation="ffi")
    )
    for f in calls:
        text = jax.jit(f).trace(scores, lens).lower(lowering_platforms=("cuda",)).as_text()
        assert "custom_call @dsv41_" in text and "broadcast_in_dim" not in text
        assert "tensor<8xi32>, tensor<1xi32>, tensor<1x1xi32>) ->" in text
    starts = jnp.zeros((8,), jnp.int32)
    f = jax.jit(lambda s, n: topk_ffi.cuda_topk(s, n, 512, starts, None, 8, "positions", "short"))
    text = f.trace(scores, lens).lower(lowering_platforms=("cuda",)).as_text()
    assert "tensor<8xi32>, tensor<8xi32>, tensor<1x1xi32>) ->" in text  # starts given: read


@needs_ext
def test_public_topk_dispatch_policy(simulate, monkeypatch):
    """The plan's CUDA select, as the public top-k lowers it: the short-row select where its
    cluster holds the row and all rows' clusters are resident at once, else the filter-first
    select, else the cluster radix select; `topk_algorithm=` reroutes every call the forced
    select takes, and only those."""
    import dsv41_jax as dj
    from dsv41_jax.plan import Spec, cuda_select, device_record, short_max_n, split_rows
    from dsv41_jax.topk import ffi as topk_ffi

    simulate(_ext.H200)

    def target(rows, n, k, **kw):
        s, lens = jnp.zeros((rows, n), jnp.float32), jnp.full((rows,), n, jnp.int32)
        f = jax.jit(lambda s, n: dj.topk(s, n, k, implementation="ffi", **kw))
        text = f.trace(s, lens).lower(lowering_platforms=("cuda",)).as_text()
        names = {v: a for a, v in topk_ffi.ALGORITHMS.items()}
        (found,) = [a for t, a in names.items() if f"@{t}" in text]
        return found

    short_max = short_max_n(device_record())
    assert short_max == 8 * 16384
    assert target(4, 9000, 512) == "short"
    assert target(200, 16384, 512) == "short"  # one CTA a row: waves of single CTAs
    assert target(15, short_max, 512) == "short"  # 15 clusters of 8 CTAs run at once
    assert target(8, short_max, 512) == "short"  # faster than the split rows (H100)

    # The filter select splits few unmasked rows past the short select's reach.
    def splits(rows, n, k=512, mask=None):
        spec = Spec("topk", rows, n, "float32", k, mask_blocks=mask)
        select, why = cuda_select(spec, device_record())
        assert (split_rows(spec, device_record()) is not None) == ("split rows" in why)
        return select == "filter" and "split rows" in why

    assert splits(8, short_max + 1) and splits(1, 1 << 20, 2048)
    assert not splits(9, short_max + 1)  # more rows: the clusters, as measured at 16 and 32
    assert not splits(8, short_max)  # the short select's row
    assert not splits(8, short_max + 1, mask=64)  # masked rows never split
    assert not splits(8, short_max + 1, 5000)  # the cluster select's k
    forced = Spec("topk", 8, short_max + 1, "float32", 512)
    assert "split rows" in cuda_select(forced, device_record(), "filter")[1]
    assert "split rows" not in cuda_select(forced, device_record(), "cluster")[1]
    assert target(16, short_max, 512) == "short"  # two waves of clusters of 8 CTAs
    assert target(30, short_max, 512) == "short"
    assert target(31, short_max, 512) == "filter"  # 31 would run in three waves
    assert target(67, 32768, 512) == "filter"  # clusters of 2 CTAs: one wave only (66)
    assert target(64, 32768, 512) == "short"
    assert target(200, 32768, 512) == "filter"  # 200 clusters would run in waves
    assert target(4, short_max + 1, 512) == "filter"
    assert target(4, short_max + 1, 5000) == "cluster"  # above the filter select's k
    assert target(4, 9000, 512, candidates=jnp.zeros((4, 64), jnp.int32)) == "short"
    assert target(4, 9000, 512, topk_algorithm="filter") == "filter"
    # The filter select declines: the policy's.
    assert target(4, 9000, 5000, topk_algorithm="filter") == "short"
    assert target(4, 9000, 512, topk_algorithm="cluster") == "cluster"
    assert target(4, short_max + 1, 512, topk_algorithm="short") == "filter"
    assert target(4, 9000, 512) == "short"
    # The sparse consumer's only: the others keep theirs.
    assert target(4, 9000, 512, topk_algorithm="onchip") == "short"
    with pytest.raises(ValueError, match="topk_algorithm must be None or one of"):
        target(4, 9000, 512, topk_algorithm="fast")


@needs_ext
def test_sparse_consumer_select_is_onchip_where_a_row_fits():
    """The SM90 sparse consumer's select attribute: the one-kernel select (attribute
    select_onchip) at any row count where one CTA holds the row, the logits then the filter
    select past that, and the logits then a forced select."""
    from dsv41_jax.plan import device_record, sparse_select
    from dsv41_jax.topk import ffi as topk_ffi

    h200 = device_record(_ext.H200)
    wide = _ext.limit("onchip_max_columns") + 8

    def select(rows, columns, forced=None):
        return sparse_select(columns, 512, 8, rows, h200, forced)[0]

    for rows in (1, 8, 31, 32, 128):
        assert select(rows, 2048 * 8) == "onchip"
    assert select(32, 64) == "onchip"
    assert select(32, wide) == "short"  # 32 clusters of 2 CTAs run at once on an H200
    assert select(128, wide) == "filter"  # 128 would run in waves
    assert select(8, 2048 * 8, "onchip") == "onchip"
    assert select(128, wide, "onchip") == "filter"
    assert select(8, 2048 * 8, "cluster") == "cluster"
    assert select(64, 2048 * 8, "short") == "short"  # the logits-then-select path at any rows
    assert _ext.limit("select_onchip") not in {
        _ext.limit(f"select_{a}") for a in topk_ffi.ALGORITHMS
    }


@needs_ext
@pytest.mark.parametrize(
    "cc,topk_runs_ffi,logits_decline",
    [
        ("9.0", True, None),
        ("10.0", True, "needs the mxfp4 cache"),  # SM100's dense kernel reads MXFP4 pages only
        ("8.0", False, "capability 8.0 \\(built for 9.0, 10.0\\)"),
        ("12.0", False, "capability 12.0 \\(built for 9.0, 10.0\\)"),
    ],
)
def test_ffi_wrappers_decline_where_no_kernel_image_exists(
    simulate, monkeypatch, caplog, cc, topk_runs_ffi, logits_decline
):
    """A simulated device of each compute capability: the FFI wrappers accept exactly the GPUs the
    extension has machine code for (own kernels sm_90a + sm_100a, DeepGEMM's logits for the
    architecture each exists for) and decline elsewhere at trace time, so `implementation=None`
    falls through, with a log line."""
    import logging

    import dsv41_jax as dj
    from dsv41_jax.logits import ffi as logits_ffi

    simulate(dataclasses.replace(_ext.H200, compute_capability=cc))
    scores = jnp.asarray(np.random.default_rng(0).standard_normal((2, 64)), jnp.float32)
    lens = jnp.array([10, 64], jnp.int32)

    def lowers(fn, *args):
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        return "custom_call @dsv41_" in text

    if topk_runs_ffi:
        assert lowers(lambda s, n: dj.topk(s, n, 4, implementation="ffi"), scores, lens)
    else:
        with pytest.raises(dj.ExtensionUnavailable, match=f"compute capability {cc}"):
            dj.topk(scores, lens, 4, implementation="ffi")
        with caplog.at_level(logging.INFO, logger="dsv41_jax"):
            got = dj.topk(scores, lens, 4, implementation=("ffi", "reference"))
        want = dj.topk(scores, lens, 4, implementation="reference")
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert f"no kernel image for compute capability {cc}" in caplog.text

    rng = np.random.default_rng(1)
    q = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((2, 1, 32, 128)), jnp.float32), jnp.ones((2, 1, 32))
    )
    cache = dj.PagedIndexCache.zeros(4, 64, 128)
    bt, ctx = jnp.zeros((2, 2), jnp.int32), jnp.array([5, 100], jnp.int32)
    if logits_decline is None:
        assert lowers(lambda *a: logits_ffi.paged_mqa_logits(*a, 256), q, cache, ctx, bt)
    else:
        with pytest.raises(dj.ExtensionUnavailable, match=logits_decline):
            dj.paged_mqa_logits(q, cache, ctx, bt, implementation="ffi")


@needs_ext
def test_limits_come_from_the_extension():
    """Buffer sizes, shape limits and mode values are defined once, in C++, and read by Python."""
    limits = _ext.extension().LIMITS
    assert set(limits) == {
        "sm90_schedule_rows",
        "sm90_max_batch",
        "sm90_sparse_max_rows",
        "sm100_sparse_candidates",
        "sm100_sparse_block",
        "mqa_row_padding",
        "sm100_num_sms",
        "sm100_logits_split",
        "sm100_max_rows",
        "sort_max_blocks",
        "sort_max_candidates",
        "filter_topk_max_k",
        "filter_topk_mask_smem",
        "filter_split_max_rows",
        "filter_split_row_words",
        "short_topk_chunk",
        "short_topk_max_cluster",
        "topk_mode_positions",
        "topk_mode_candidate_blocks",
        "select_cluster",
        "select_filter",
        "select_short",
        "select_onchip",
        "onchip_max_columns",
    }
    assert all(isinstance(v, int) for v in limits.values())
    assert len({limits[f"select_{s}"] for s in ("cluster", "filter", "short", "onchip")}) == 4
    assert limits["topk_mode_positions"] != limits["topk_mode_candidate_blocks"]
    assert _ext.limit("sm90_schedule_rows") == limits["sm90_schedule_rows"]
