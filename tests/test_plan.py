"""dsv41_jax.plan: the selection ops' decisions (implementation order, CUDA select) with their
reasons, as one hashable value, on simulated device records (nothing patched)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from devices import CPU, SM78, SM114

import dsv41_jax as dj
from dsv41_jax import _ext, info
from dsv41_jax.plan import Device, Plan, Spec, device_record, short_max_n

F32, BF16 = jnp.float32, jnp.bfloat16
needs_ext = pytest.mark.skipif(not _ext.available(), reason="needs the built CUDA extension")


def sds(shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


@pytest.fixture(params=[info.H200, SM114, SM78], ids=["sm132", "sm114", "sm78"])
def gpu(request) -> Device:
    """A simulated SM90 device record (the built extension's limits, each part's occupancy)."""
    if not _ext.available():
        pytest.skip("needs the built CUDA extension")
    return device_record(request.param)


def test_the_public_names():
    assert callable(dj.plan)  # the builder, exported beside the ops
    assert "plan" in dj.__all__ and "Plan" in dj.__all__ and dj.Plan is Plan
    p = dj.plan("topk", sds((8, 4096)), 64, device=CPU)
    assert isinstance(p, Plan) and p.spec == Spec("topk", 8, 4096, "float32", 64)
    assert p.device == Device("cpu") and str(p.device) == "cpu"


# (op, scores, k, starts, mask blocks, block size) -> the order of implementation=None.
ORDERS = [
    ("topk", sds((8, 4096)), 64, False, None, 8, "ffi"),  # the short select's one CTA a row
    ("topk", sds((8, 16384)), 512, False, None, 8, "ffi"),
    ("topk", sds((8, 16385)), 512, False, None, 8, "ffi"),  # longer rows
    ("topk", sds((8, 131072)), 512, False, None, 8, "ffi"),
    ("topk", sds((8, 4096)), 64, True, None, 8, "ffi"),  # ragged rows: read in place by CUDA
    ("topk", sds((8, 131072)), 512, True, 2048, 8, "ffi"),  # gathered, but ragged: CUDA first
    ("topk", sds((8, 4096), BF16), 64, False, None, 8, "ffi"),
    ("topk", sds((8, 4100), BF16), 64, False, None, 8, "ffi"),  # bf16 rows of a multiple of 8
    ("topk", sds((8, 4096), jnp.float16), 64, False, None, 8, "ffi"),
    ("topk", sds((8, 131072)), 512, False, 2048, 8, "pallas"),  # gathered: 16K positions
    ("topk", sds((8, 131072)), 512, False, 4096, 8, "ffi"),  # too many to gather
    ("topk", sds((8, 4096), BF16), 64, False, 16, 4, "ffi"),  # bf16 mask, blocks of 4
    ("topk", sds((8, 4096)), 20000, False, None, 8, "ffi"),  # k past the Pallas select's
    ("select_candidate_blocks", sds((8, 16384)), 2048, False, None, 8, "ffi"),
    ("select_candidate_blocks", sds((8, 16385)), 2048, False, None, 8, "ffi"),
    ("select_candidate_blocks", sds((8, 4096), BF16), 64, False, None, 8, "ffi"),
]


@pytest.mark.parametrize("op,scores,k,starts,mask,b,first", ORDERS)
def test_the_order_of_implementation_none(op, scores, k, starts, mask, b, first):
    """The Pallas select first where it measured fastest, else the CUDA selects; the reference
    last; the same order on every device."""
    st = sds((8,), jnp.int32) if starts else None
    cand = None if mask is None else sds((8, mask), jnp.int32)
    orders = set()
    for facts in (CPU, info.H200, SM78):
        p = dj.plan(op, scores, k, starts=st, candidates=cand, block_size=b, device=facts)
        orders.add(p.order)
        assert p.implementation is None and p.order_reason.startswith(
            "the Pallas select first" if first == "pallas" else "the CUDA selects first"
        )
    assert orders == {(first, *[n for n in ("pallas", "ffi") if n != first], "reference")}


@pytest.mark.parametrize("op", ["topk", "select_candidate_blocks"])
def test_every_implementation_name_and_preference_order(op):
    """A name runs exactly it; a preference order keeps its known names in its order; unknown
    names and an empty order are ValueErrors naming the op."""
    s = sds((4, 256))
    cases = [
        ("ffi", ("ffi",)),
        ("pallas", ("pallas",)),
        ("reference", ("reference",)),
        (("pallas", "ffi", "reference"), ("pallas", "ffi", "reference")),
        (("ffi", "pallas", "reference"), ("ffi", "pallas", "reference")),
        (("reference", "ffi"), ("reference", "ffi")),
        (["pallas", "reference"], ("pallas", "reference")),
    ]
    for implementation, order in cases:
        p = dj.plan(op, s, 8, implementation=implementation, device=CPU)
        assert p.order == order and "as asked" in p.order_reason
        assert p.implementation == order  # a name is kept as a one-name order
    with pytest.raises(ValueError, match=f"{op}: unknown implementation 'triton'"):
        dj.plan(op, s, 8, implementation="triton", device=CPU)
    with pytest.raises(ValueError, match="unknown implementation names"):
        dj.plan(op, s, 8, implementation=("ffi", "triton"), device=CPU)
    with pytest.raises(ValueError, match="must not be an empty sequence"):
        dj.plan(op, s, 8, implementation=(), device=CPU)
    with pytest.raises(ValueError, match="op must be one of"):
        dj.plan("sort", s, 8, device=CPU)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scores must be an array or ShapeDtypeStruct"):
        dj.plan(op, sds((256,)), 8, device=CPU)
    with pytest.raises(ValueError, match="k must be a positive int"):
        dj.plan(op, s, 0, device=CPU)


def test_no_cuda_select_without_a_gpu_or_the_extension():
    p = dj.plan("topk", sds((8, 4096)), 64, device=CPU)
    assert p.select is None and p.select_reason == "no CUDA select on a cpu backend"
    bare = Device("gpu", "9.0", 132)  # a GPU record without the extension's limits
    p = dj.plan("topk", sds((8, 4096)), 64, device=bare)
    assert p.select is None and "not built" in p.select_reason


def test_ragged_rows_run_the_pallas_kernels_on_a_gpu_without_the_extension():
    """A pure-Python install on a GPU: ragged rows (starts) ran the reference top-k and block
    scores, the Pallas kernels declining them; they run the Pallas kernels now."""
    from dsv41_jax.blocks.api import BLOCK_AMAX

    bare = Device("gpu", "9.0", 132)
    starts = sds((8,), jnp.int32)
    for mask in (None, sds((8, 16), jnp.int32)):
        p = dj.plan("topk", sds((8, 4096)), 64, starts=starts, candidates=mask, device=bare)
        assert p.runs == "pallas" and [n for n, _ in p.declined] == ["ffi"]
    amax = BLOCK_AMAX.plan(None, sds((8, 4096)), starts, 8, starts, True, device=bare)
    assert amax.runs == "pallas" and amax.declined == ()


def test_the_cuda_select_follows_the_device_record(gpu):
    """The short-row select where its cluster holds the row and the rows' clusters run at once
    on this device, or in two waves for rows of 4 or more CTAs; else the filter-first select,
    else the cluster radix select."""
    widest = short_max_n(gpu)
    eights, twos = gpu.clusters_at_once(8), gpu.clusters_at_once(2)  # 15 / 14 / 9, 66 / 64 / 39

    def select(rows, n, k=512, **kw):
        p = dj.plan("topk", sds((rows, n)), k, device=gpu, **kw)
        return p.select, p.select_reason

    assert select(200, 16384) == (
        "short",
        "the short-row select: one CTA holds a row of 16384 scores (<= 16384)",
    )
    assert select(eights, widest)[0] == "short"
    sel, why = select(eights + 1, widest)
    assert sel == "short" and f"clusters of 8 CTAs run in two waves ({eights} run at once" in why
    assert select(2 * eights, widest)[0] == "short"
    sel, why = select(2 * eights + 1, widest)
    assert (
        sel == "filter" and f"{2 * eights + 1} clusters of 8 CTAs would run in more than two" in why
    )
    assert select(twos, 2 * 16384)[0] == "short"
    sel, why = select(twos + 1, 2 * 16384)
    assert sel == "filter" and f"{twos + 1} clusters of 2 CTAs would run in waves ({twos}" in why
    assert select(4, widest + 1)[0] == "filter"
    sel, why = select(4, widest + 1, 5000)
    assert sel == "cluster" and "filter declines (k = 5000 > 4096)" in why
    mask = sds((4, 64), jnp.int32)
    assert select(4, 9000, candidates=mask)[0] == "short"


def test_a_forced_select_where_it_takes_the_call(gpu):
    """`topk_algorithm=` runs that select wherever it takes the call; where it declines, the
    policy's, with the reason; "onchip" is the sparse consumer's only."""

    def plan(n, k=512, forced=None):
        return dj.plan("topk", sds((4, n)), k, device=gpu, topk_algorithm=forced)

    for forced in ("short", "filter", "cluster"):
        p = plan(9000, forced=forced)
        assert (p.select, p.topk_algorithm) == (forced, forced)
        assert p.select_reason == f"topk_algorithm={forced!r}, as asked"
    p = plan(9000, 5000, "filter")
    assert p.select == "short" and "topk_algorithm='filter' declines: k = 5000" in p.select_reason
    p = plan(short_max_n(gpu) + 1, forced="short")
    assert p.select == "filter" and "topk_algorithm='short' declines: rows of" in p.select_reason
    p = plan(9000, forced="onchip")
    assert p.select == "short" and "sparse consumer's rows only" in p.select_reason
    with pytest.raises(ValueError, match="topk_algorithm must be None or one of"):
        plan(9000, forced="fast")
    with pytest.raises(ValueError, match="topk_algorithm must be None or one of"):
        dj.topk(jnp.zeros((2, 8)), jnp.full((2,), 8), 2, topk_algorithm="fast")


def test_the_sparse_consumers_select(gpu):
    from dsv41_jax.plan import sparse_select

    widest = gpu.limit("onchip_max_columns")
    assert sparse_select(2048 * 8, 512, 8, 64, gpu)[0] == "onchip"
    assert sparse_select(2048 * 8, 512, 8, 64, gpu, "short")[0] == "short"
    select, why = sparse_select(widest + 8, 512, 8, 200, gpu)
    assert select == "filter" and why.startswith(f"sparse rows of {widest + 8} columns")


def test_a_plan_is_hashable_and_a_static_jit_argument():
    """Equal calls give equal plans (one jit cache entry); a plan runs the call it was made for
    and refuses any other."""
    s, lens = jnp.asarray(np.arange(64, dtype=np.float32).reshape(2, 32)), jnp.array([32, 5])
    p = dj.plan("topk", s, 4)
    assert p == dj.plan("topk", sds((2, 32)), 4) and hash(p) == hash(dj.plan("topk", s, 4))
    assert p != dj.plan("topk", s, 4, topk_algorithm="filter")
    assert len({p, dj.plan("topk", s, 4), dj.plan("topk", s, 4, implementation="reference")}) == 2
    traces = []

    def run(s, lens, plan):
        traces.append(plan)
        return dj.topk(s, lens, 4, plan=plan)

    f = jax.jit(run, static_argnums=2)
    want = dj.topk(s, lens, 4, implementation="reference")
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(s, lens, p)), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(f(s, lens, dj.plan("topk", s, 4))), want)
    assert len(traces) == 1  # an equal plan is the same cache entry
    other = dj.plan("topk", s, 4, implementation="reference")
    np.testing.assert_array_equal(np.asarray(f(s, lens, other)), want)
    assert len(traces) == 2
    with pytest.raises(ValueError, match="plan was made for topk \\[2, 32\\] float32 k=8"):
        dj.topk(s, lens, 4, plan=dj.plan("topk", s, 8))
    with pytest.raises(ValueError, match="either plan or implementation"):
        dj.topk(s, lens, 4, plan=p, implementation="reference")
    with pytest.raises(ValueError, match="plan must be a dsv41_jax.Plan"):
        dj.topk(s, lens, 4, plan="reference")  # type: ignore[arg-type]
    blocks = jnp.asarray(np.arange(16, dtype=np.float32).reshape(2, 8))
    c = dj.plan("select_candidate_blocks", blocks, 3, block_size=4)
    got = dj.select_candidate_blocks(
        blocks, jnp.array([32, 9]), num_candidates=3, block_size=4, plan=c
    )
    want_c = dj.select_candidate_blocks(
        blocks, jnp.array([32, 9]), num_candidates=3, block_size=4, implementation="reference"
    )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want_c))


@needs_ext
def test_a_forced_select_changes_the_lowering(simulated_h200):
    """A forced select is part of what jit keys on (an argument, not a global): each one traces
    again and lowers to its own kernel, through `topk_algorithm=` and through a plan."""
    from dsv41_jax.topk import ffi as topk_ffi

    scores, lens = sds((4, 9000)), sds((4,), jnp.int32)
    f = jax.jit(dj.topk, static_argnames=("k", "implementation", "topk_algorithm"))
    g = jax.jit(lambda s, n, plan: dj.topk(s, n, 512, plan=plan), static_argnums=2)

    def kernels(text):
        return {a for a, target in topk_ffi.ALGORITHMS.items() if f"@{target}" in text}

    for forced, want in ((None, "short"), ("filter", "filter"), ("cluster", "cluster")):
        lowered = f.trace(scores, lens, k=512, implementation="ffi", topk_algorithm=forced)
        assert kernels(lowered.lower(lowering_platforms=("cuda",)).as_text()) == {want}
        p = dj.plan("topk", scores, 512, implementation="ffi", topk_algorithm=forced)
        assert p.select == want
        text = g.trace(scores, lens, p).lower(lowering_platforms=("cuda",)).as_text()
        assert kernels(text) == {want}


@needs_ext
def test_a_forced_select_reaches_the_step(simulated_h200):
    """`make_two_level_indexer(topk_algorithm=)`: a static field of the step, so each forced
    select is its own trace, and every layer's select (one custom call a layer on SM90) follows
    it."""
    cfg = dj.IndexerConfig()
    batch, pages = 2, 2048  # 128K positions: the consumers read their candidates
    row = cfg.head_dim + 4  # fp8 values and a float32 scale
    cache = dj.PagedIndexCache(sds((batch * pages, cfg.page_size, 1, row), jnp.uint8), "fp8")
    shape = (batch, cfg.next_n, cfg.num_heads)
    query = dj.QueryBundle(sds((*shape, cfg.head_dim), jnp.float8_e4m3fn), sds(shape), None, "fp8")
    layers = (20, 24)
    args = (
        dict.fromkeys(layers, query),
        dict.fromkeys(layers, cache),
        sds((batch,), jnp.int32),
        sds((batch, pages), jnp.int32),
    )
    step = jax.jit(lambda ix, *a: ix.decode(*a).selections)
    texts = {}
    for forced in (None, "cluster"):
        ix = dj.make_two_level_indexer(
            cfg, source_layer=20, consumer_layers=(24,), topk_algorithm=forced
        )
        lowered = step.trace(ix, *args).lower(lowering_platforms=("cuda",))
        texts[forced] = lowered.as_text()
    assert texts[None] != texts["cluster"]
    cluster = _ext.limit("select_cluster")
    # Every layer's select in its custom call (the source's and the consumer's), the source's
    # top-C blocks' too.
    assert texts["cluster"].count(f"select = {cluster} : i32") == 2
    assert f"select_c = {cluster} : i32" in texts["cluster"]
    assert f"select = {cluster} : i32" not in texts[None]


def test_explain_shows_the_plan():
    choices = info.explain(dj.topk, sds((8, 131072)), sds((8,), jnp.int32), 512)
    (choice,) = [c for c in choices if c.op == "topk"]
    assert isinstance(choice.plan, Plan) and choice.plan.order[0] == "ffi"
    text = str(choice)
    assert "plan, implementations: ffi, pallas, reference (the CUDA selects first" in text
    assert "plan, CUDA select: " in text


@needs_ext
def test_explain_shows_the_cuda_select_and_its_reason_on_a_simulated_h200(simulated_h200):
    choices = info.explain(dj.topk, sds((8, 131072)), sds((8,), jnp.int32), 512)
    (choice,) = [c for c in choices if c.op == "topk"]
    assert choice.implementation == "ffi" and choice.plan is not None
    assert choice.plan.device == device_record(info.H200)
    assert (
        "plan, CUDA select: short (the short-row select: the 8 rows' clusters of 8 CTAs run at "
        "once (15 do on this device))" in str(choice)
    )


@needs_ext
def test_explain_shows_the_fused_layers_selects_on_a_simulated_h200(simulated_h200):
    """The fused layers ask the same plan (implementation "ffi") and record it, so a decode
    step's selects show with their reasons."""
    choices = info.decode_step(batch=8, context=131072)
    (top,) = {str(c) for c in choices if c.op == "fused topk: CUDA select"}
    assert "short (the short-row select: the 8 rows' clusters of 8 CTAs run at once" in top
    (blocks,) = {c.implementation for c in choices if c.op == "fused candidate blocks: CUDA select"}
    assert blocks == "short"
    sparse = {c.implementation for c in choices if c.op == "fused sparse topk: CUDA select"}
    assert sparse == {"onchip"}


def test_the_plan_names_the_implementation_that_runs():
    """`runs`: the first implementation of the order that supports the call on the device
    record (each implementation's `supports`), with the reasons of those passed over; the op
    runs exactly it."""
    p = dj.plan("select_candidate_blocks", sds((8, 4096)), 64, device=CPU)
    assert p.runs == "reference" and [n for n, _ in p.declined] == ["ffi", "pallas"]
    assert "needs a CUDA GPU backend" in p.declined[1][1]
    assert ("runs", "reference") == p.decisions()[2][:2]
    none = dj.plan("topk", sds((8, 4096)), 64, device=CPU, implementation="ffi")
    assert none.runs is None and [n for n, _ in none.declined] == ["ffi"]
    with pytest.raises(dj.ExtensionUnavailable, match="topk: no implementation accepted"):
        dj.topk(jnp.zeros((8, 4096)), jnp.full((8,), 9), 64, implementation="ffi")


@needs_ext
def test_the_implementation_that_runs_on_a_simulated_h200():
    h200 = info.H200
    assert dj.plan("topk", sds((8, 4096)), 64, device=h200).runs == "ffi"
    blocks = dj.plan("select_candidate_blocks", sds((8, 4096)), 64, device=h200)
    assert blocks.runs == "ffi"
    masked = sds((8, 2048), jnp.int32)  # a mask the Pallas select gathers
    gathered = dj.plan("topk", sds((8, 131072)), 512, candidates=masked, device=h200)
    assert gathered.runs == "pallas"
    assert dj.plan("topk", sds((8, 131072)), 512, device=h200).runs == "ffi"
    starts = sds((8,), jnp.int32)
    p = dj.plan("topk", sds((8, 4096)), 64, starts=starts, device=h200)
    assert p.runs == "ffi" and p.declined == ()
    half = dj.plan("topk", sds((8, 4096), jnp.float16), 64, device=h200)
    assert half.runs == "reference"
    assert [n for n, _ in half.declined] == ["ffi", "pallas"]
    assert "float32 or bfloat16 scores (got float16)" in half.declined[0][1]
    big_k = dj.plan(
        "topk", sds((8, 4096)), 5000, device=h200, implementation="ffi", topk_algorithm="filter"
    )
    assert big_k.runs == "ffi" and big_k.select == "short"  # filter declines k = 5000
    # A plan made for an H200, run on this CPU: the planned kernel declines, with the reason.
    if jax.default_backend() != "gpu":
        s, n = jnp.zeros((8, 131072)), jnp.full((8,), 9)
        planned = dj.plan("topk", s, 512, device=h200)
        with pytest.raises(dj.ExtensionUnavailable, match="the plan was made for gpu 9.0"):
            dj.topk(s, n, 512, plan=planned)


# ------------------------------------------------ issue 70: a plan built by hand is checked
@pytest.mark.parametrize(
    "change,message",
    [
        (dict(runs="bogus"), "Plan.runs must be None or one of Plan.order"),  # was a KeyError
        (dict(order=("ffi", "cuda")), "Plan.order must be a tuple of distinct names"),
        (dict(order=()), "Plan.order must be a tuple of distinct names"),
        (dict(select="radix"), "Plan.select must be None or one of"),
        (dict(declined=(("cuda", "why"),)), "Plan.declined must be a tuple"),
        (dict(implementation="cuda"), "unknown implementation names"),
        (dict(topk_algorithm="radix"), "topk_algorithm must be None or one of"),
        (dict(spec=None), "Plan.spec must be a Spec"),
        (dict(device=info.H200), "Plan.device must be a Device"),
    ],
)
def test_a_plan_with_unknown_names_is_refused_when_made(change, message):
    """A Plan with an implementation the op does not have raised KeyError inside the op; every
    field is checked as `resolve` makes it, so a plan made by hand or `dataclasses.replace` is
    refused where it is made."""
    import dataclasses

    p = dj.plan("topk", sds((8, 4096)), 64, device=CPU)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(p, **change)
    same = dataclasses.replace(p, implementation="reference", runs="reference")
    assert same.implementation == ("reference",)
    assert dj.topk(jnp.zeros((8, 4096)), jnp.full((8,), 9), 64, plan=same).shape == (8, 64)


def test_spec_and_device_records_check_their_fields():
    with pytest.raises(ValueError, match="Spec.op must be one of"):
        Spec("sort", 8, 4096, "float32", 64)
    with pytest.raises(ValueError, match="Spec.dtype must be a dtype name"):
        Spec("topk", 8, 4096, "float33", 64)
    with pytest.raises(ValueError, match="Spec.k must be a positive int"):
        Spec("topk", 8, 4096, "float32", 0)
    with pytest.raises(ValueError, match="Device.sm_count must be a non-negative int"):
        Device("gpu", "9.0", -1)
    with pytest.raises(ValueError, match="Device.limits must be a sequence of"):
        Device("gpu", "9.0", 132, (), (("short_topk_chunk",),))
    d = Device("gpu", "9.0", 132, [132, 66], [["short_topk_chunk", 16384]])
    assert d.short_topk_clusters == (132, 66) and d.limits == (("short_topk_chunk", 16384),)
    assert hash(d) and d.limit("short_topk_chunk") == 16384
