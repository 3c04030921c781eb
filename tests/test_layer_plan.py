"""dsv41_jax.plan.layers: the layers' and the decode step's decisions (consumer path, the
source's every-block table, fused layers, DCP's path and exchange),
made from shapes and a device record, on simulated devices (nothing patched, nothing run)."""

from __future__ import annotations

import collections
import dataclasses
import re

import jax
import pytest
from devices import CPU, SM78, SM100

import dsv41_jax as dj
from dsv41_jax import _ext, fused, info
from dsv41_jax.plan import Device, LayerPlan, StepPlan, device_record
from dsv41_jax.plan.layers import (
    OWN_TABLE_SPARSE_MIN_ROWS,
    TABLE_SPARSE_MIN_ROWS,
    CacheShape,
    Decision,
    LayerSpec,
    QueryShape,
    plan_layer,
    plan_step,
)
from dsv41_jax.plan.sharded import (
    TOPC_MIN_BLOCKS_PER_CANDIDATE,
    dcp_exchange,
    dcp_route,
    row_sharding,
)

MXFP4 = dj.IndexerConfig(cache_format="mxfp4")
needs_ext = pytest.mark.skipif(not _ext.available(), reason="needs the built CUDA extension")


def inputs(cfg, batch, context):
    """Abstract queries and caches (layers 20-36), lengths and page table of a V4.1 decode step
    at `batch` requests of `context` positions (what `info.decode_step` traces)."""
    _, queries, caches, lens, table = info._decode_inputs(batch, context, cfg)
    return queries, caches, lens, table


def step(batch, context, device, config=None, **indexer):
    """The plan of a V4.1 step (source 20, consumers 24-36) on `device`; `indexer`: the
    TwoLevelIndexer's `path`, `implementation`, `fuse`."""
    cfg = config or dj.IndexerConfig()
    layers = (20, 24, 28, 32, 36)
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=layers[1:], **indexer)
    queries, caches, _, table = inputs(cfg, batch, context)
    return ix.plan(queries, caches, table, device=device)


def routes(sp: StepPlan) -> list[str]:
    return [p.route for _, p in sp.layers if p.spec.role == "consumer"]


@needs_ext
@pytest.mark.parametrize("facts", [info.H200, SM78], ids=["sm132", "sm78"])
def test_the_v41_step_on_sm90(facts):
    """SM90, any SM count: every layer fused (one custom call a layer); the consumers take
    the sparse path past C·B positions; within them (the table is the step's own: every block,
    where the source's table is every block) the dense top-k at 1 query row, the sparse path
    from 8."""
    long = step(8, 131072, facts)
    assert long.shared
    assert routes(long) == ["sparse"] * 4
    assert all(p.fused for _, p in long.layers)
    assert not long.layer(20).every_block and "16384 > C = 2048" in long.layer(20).blocks_reason
    short = step(1, 16384, facts)
    assert routes(short) == ["dense"] * 4
    assert short.layer(20).every_block
    assert short.layer(24).route_reason.startswith("every block is a candidate")
    eight = step(8, 16384, facts)
    assert routes(eight) == ["sparse"] * 4 and eight.layer(20).every_block
    assert eight.layer(24).route_reason.startswith("path='auto': every block is a candidate")
    assert [s.what for s in eight.layer(24).selects] == ["sparse topk"]
    assert str(long).startswith(f"step plan on gpu 9.0, {facts.sm_count} SMs")


def test_the_v41_step_on_a_cpu():
    """No CUDA kernels: op by op, the mask path with the sparse one's reason."""
    sp = step(8, 131072, CPU)
    assert not sp.shared
    assert routes(sp) == ["mask"] * 4
    for _, p in sp.layers:
        assert not p.fused and ("CUDA GPU" in p.fused_reason or "not" in p.fused_reason)
    consumer = sp.layer(24)
    ((name, why),) = consumer.declined
    assert (
        name == "sparse"
        and consumer.route_reason == f"path='auto': the sparse path declines ({why})"
    )


@needs_ext
@pytest.mark.parametrize("forced", ["short", "filter", "cluster", "onchip"])
def test_a_forced_select_reaches_every_fused_layer(forced):
    """`topk_algorithm` is a field of each layer's plan: every fused select is the forced one
    wherever it takes the call ("onchip" only the sparse consumers'; the others take the
    logits-then-select form with it), the policy's where it declines."""
    sp = step(8, 131072, info.H200, topk_algorithm=forced)
    for _, p in sp.layers:
        assert p.topk_algorithm == forced and p.selects, p
        for s in p.selects:
            if forced == "onchip" and s.what != "sparse topk":
                assert s.choice != "onchip" and "declines" in s.reason, s
            else:
                assert s.choice == forced, s
                assert forced == "onchip" or "as asked" in s.reason, s


@needs_ext
def test_more_rows_than_one_dense_call_still_take_the_sparse_path():
    """1,400 query rows (700 requests x next_n 2): the sparse kernels take them
    (`sm90_sparse_max_rows`), so "auto" does."""
    sp = step(700, 131072, info.H200, dj.IndexerConfig(next_n=2))
    assert routes(sp) == ["sparse"] * 4


@needs_ext
def test_sm100_takes_the_sparse_path_with_mxfp4_and_runs_no_fused_layer():
    sp = step(8, 131072, SM100, MXFP4)
    assert routes(sp) == ["sparse"] * 4  # DeepGEMM's SM100 sparse kernel
    assert not sp.shared and all(not p.fused for _, p in sp.layers)
    assert "no kernel image for compute capability 10.0" in sp.layer(20).fused_reason
    fp8 = step(8, 131072, SM100)
    assert routes(fp8) == ["mask"] * 4
    assert "needs the mxfp4 cache" in fp8.layer(24).declined[0][1]
    mxfp4_on_sm90 = step(8, 131072, info.H200, MXFP4)  # no SM90 kernel reads mxfp4
    assert routes(mxfp4_on_sm90) == ["mask"] * 4 and not mxfp4_on_sm90.shared
    assert "needs the fp8 cache" in mxfp4_on_sm90.layer(20).fused_reason


@needs_ext
def test_fuse_implementations_and_paths():
    h200 = info.H200
    layers = step(8, 131072, h200)
    assert layers.shared and all(p.fused for _, p in layers.layers)
    ops = step(8, 131072, h200, fuse=False)
    assert not ops.shared
    assert {p.fused_reason for _, p in ops.layers} == {"fuse=False, as asked"}
    ref = step(8, 131072, h200, implementation="reference")
    assert routes(ref) == ["mask"] * 4 and not ref.shared
    assert "excludes 'ffi'" in ref.layer(24).declined[0][1]
    assert "does not prefer 'ffi'" in ref.layer(20).fused_reason
    pallas_first = step(8, 131072, h200, implementation=("pallas", "ffi"))
    assert routes(pallas_first) == ["sparse"] * 4 and not pallas_first.layer(24).fused
    mask = step(8, 131072, h200, path="mask")
    assert routes(mask) == ["mask"] * 4 and mask.shared
    assert mask.layer(24).route_reason == "path='mask', as asked"
    with pytest.raises(ValueError, match="no sparse logits kernel on this GPU.*needs the fp8"):
        step(8, 131072, h200, MXFP4, path="sparse")
    ref_sparse = step(8, 131072, h200, MXFP4, path="sparse", implementation="reference")
    assert routes(ref_sparse) == ["sparse"] * 4  # the slow reference, asked for by name


def spec(role="consumer", next_n=1, pages=2048, own_table=False, fmt="fp8", batch=8):
    return LayerSpec(
        role,
        QueryShape(batch, next_n, 32),
        CacheShape(fmt, 128, 64, 8 * pages),
        pages,
        512,
        2048,
        8,
        own_table,
    )


@needs_ext
def test_a_consumer_of_a_table_from_elsewhere_and_a_step_without_a_source():
    h200 = device_record(info.H200)
    # A table not published by this step, within C·B positions: the mask path (`select`).
    p = plan_layer(spec(pages=256), h200)
    assert p.route == "mask" and "at most C·B = 16384" in p.route_reason
    assert plan_layer(spec(pages=256, own_table=True, batch=1), h200).route == "dense"
    with pytest.raises(ValueError, match="path must be"):
        plan_layer(spec(), h200, path="dense")  # type: ignore[arg-type]
    plain = plan_step([(3, spec("plain"))], h200)
    assert plain.shared and plain.layer(3).route == "dense"
    with pytest.raises(KeyError, match="no indexer layer 4"):
        plain.layer(4)


def assert_sparse_from(plan, least, within, shapes):
    """`plan(batch, next_n)` at each of `shapes` (from `least` query rows): the sparse row,
    fused, none declined, because `within` but from `least` query rows the sparse row is
    faster."""
    for batch, next_n in shapes:
        p = plan(batch, next_n)
        assert p.route == "sparse" and p.declined == (), (batch, next_n)
        assert p.route_reason.startswith(f"path='auto': {within}")
        assert f", but from {least} query rows (here {batch * next_n})" in p.route_reason
        assert p.fused and [s.what for s in p.selects] == ["sparse topk"]


@needs_ext
def test_a_table_from_elsewhere_takes_the_sparse_row_from_64_query_rows():
    """A consumer of a table not published by its step, over at most C·B positions: "auto"
    selects inside the table's mask under 64 query rows and over the sparse row (the table
    rebuilt first) from 64 (one select measured faster so on the H200 and H100), where the
    sparse path is available; elsewhere the mask path, naming why the sparse row was passed
    over."""
    assert TABLE_SPARSE_MIN_ROWS == 64
    h200 = device_record(info.H200)

    def elsewhere(batch, next_n=1, fmt="fp8", device=h200, **kw):
        return plan_layer(spec(pages=256, fmt=fmt, batch=batch, next_n=next_n), device, **kw)

    within = "the page table holds at most C·B = 16384 positions a row"
    for batch, next_n in ((1, 1), (8, 1), (63, 1), (31, 2)):
        p = elsewhere(batch, next_n)
        ((name, why),) = p.declined
        assert p.route == "mask" and name == "sparse" and why.startswith(within), (batch, next_n)
        assert why.endswith(
            f"; {batch * next_n} query row{'s' * (batch * next_n > 1)}, fewer than 64: the mask "
            "path is faster there"
        )
        assert p.route_reason == f"path='auto': the sparse path declines ({why})"
    assert_sparse_from(elsewhere, 64, within, ((64, 1), (32, 2), (128, 1)))
    # The sparse path declined: the mask path at any row count.
    assert elsewhere(64, implementation="reference").route == "mask"
    assert elsewhere(64, fmt="mxfp4").route == "mask"
    for device in (device_record(CPU), Device("gpu", "9.0", 132)):
        p = elsewhere(64, device=device)
        assert p.route == "mask" and "fewer than" not in p.declined[0][1], device


@needs_ext
def test_an_own_table_consumer_takes_the_sparse_row_from_8_query_rows():
    """A consumer of the table its step just published, over at most C·B positions (every
    block a candidate): "auto" takes the dense top-k under 8 query rows and the sparse row from
    8 (the whole step measured faster so on the H200 and H100), where the sparse path is
    available; elsewhere the dense top-k, naming why the sparse row was passed over."""
    assert OWN_TABLE_SPARSE_MIN_ROWS == 8
    h200 = device_record(info.H200)

    def own(batch=8, next_n=1, fmt="fp8", device=h200, **kw):
        s = spec(pages=256, own_table=True, fmt=fmt, batch=batch, next_n=next_n)
        return plan_layer(s, device, **kw)

    every = "every block is a candidate: the page table holds at most C·B = 16384 positions"
    for batch, next_n in ((1, 1), (7, 1), (3, 2)):
        p = own(batch, next_n)
        assert p.route == "dense" and p.route_reason == every, (batch, next_n)
        ((name, why),) = p.declined
        assert name == "sparse" and f"{batch * next_n} query row" in why and "fewer than 8" in why
        assert p.fused and [s.what for s in p.selects] == ["topk"]
    assert_sparse_from(own, 8, every, ((8, 1), (4, 2), (64, 1)))
    # The sparse path declined: the dense top-k, with the decline's reason.
    ref = own(implementation="reference")
    assert ref.route == "dense" and ref.route_reason == every
    assert ref.declined == (
        ("sparse", "implementation=('reference',) excludes 'ffi' (the sparse kernels)"),
    )
    assert own(implementation=("pallas", "ffi")).route == "sparse"  # 'ffi' among them
    mxfp4 = own(fmt="mxfp4")  # no SM90 sparse kernel reads the mxfp4 cache
    assert mxfp4.route == "dense" and "needs the fp8 cache" in mxfp4.declined[0][1]
    for device in (device_record(CPU), Device("gpu", "9.0", 132)):  # no kernel, no limits
        p = own(device=device)
        assert p.route == "dense" and p.declined[0][0] == "sparse", device
        assert "fewer than 8" not in p.declined[0][1]
    # A table from elsewhere: the mask path at 8 rows (the sparse row from 64, the test below);
    # asked paths are as asked.
    assert plan_layer(spec(pages=256, batch=8), h200).route == "mask"
    assert own(path="mask").route == "mask" and own(batch=1, path="sparse").route == "sparse"
    # Past C·B positions the sparse path at any row count, own table or not.
    long = spec(pages=2048, own_table=True, batch=1)
    assert plan_layer(long, h200).route == "sparse"
    # In a step: the sparse consumer over the every-block table, both fused.
    sp = plan_step([(0, spec("source", pages=256)), (1, spec(pages=256, own_table=True))], h200)
    assert sp.shared and sp.layer(0).every_block and sp.layer(1).route == "sparse"


def test_a_gpu_record_without_the_extension_fuses_nothing():
    bare = Device("gpu", "9.0", 132)
    p = plan_layer(spec(), bare)
    # "not installed" where this machine has no extension either (make CUDA=0)
    assert not p.fused and ("not built" in p.fused_reason or "not installed" in p.fused_reason)
    # the sparse route's reason: this record holds no limits, or (make CUDA=0) no extension here
    missing = "not built" if _ext.available() else "not installed"
    assert p.route == "mask" and missing in p.declined[0][1]


@needs_ext
def test_plans_are_values():
    """Equal inputs give equal, hashable plans; `decode` runs the plan `plan` returns."""
    a, b = step(8, 131072, info.H200), step(8, 131072, info.H200)
    assert a == b and hash(a) == hash(b) and isinstance(a.layer(24), LayerPlan)
    assert a != step(8, 131072, SM78)
    assert dataclasses.replace(a.layer(24), route="mask") != a.layer(24)
    assert info.decode_step_plan(8, 131072, device=info.H200) == a
    with info.simulated_device(info.H200):
        assert info.decode_step_plan(8, 131072) == a


def test_sharded_decisions():
    assert dcp_route("mask") == Decision("consumer path", "mask", "path='mask', as asked")
    assert dcp_route("sparse").choice == "sparse"
    auto = dcp_route("auto")
    assert (
        auto.choice == "mask" and auto.reason == "the DCP sparse path is run on host devices only"
    )
    with pytest.raises(ValueError, match="path must be"):
        dcp_route("dense")
    many = TOPC_MIN_BLOCKS_PER_CANDIDATE * 2048
    assert dcp_exchange("auto", many, 2048).choice == "topc"
    assert dcp_exchange("auto", many - 1, 2048).choice == "pmax"
    assert "rows of 65535 blocks < 32 x C = 65536" in str(
        dcp_exchange("auto", many - 1, 2048).reason
    )
    assert dcp_exchange("pmax", many, 2048) == Decision(
        "exchange", "pmax", "exchange='pmax', as asked"
    )
    with pytest.raises(ValueError, match="exchange must be"):
        dcp_exchange("allgather", 1, 1)
    assert row_sharding(8, 2) == Decision("row sharding", "rows", "4 requests a device")
    assert (
        row_sharding(8, 3).choice == "replicated" and "do not divide" in row_sharding(8, 3).reason
    )
    assert row_sharding(8, 1).choice == "replicated"


@needs_ext
@pytest.mark.parametrize(
    "batch,context,indexer",
    [
        (8, 131072, {}),
        (1, 16384, {}),
        (8, 16384, {}),
        (8, 131072, {"path": "mask"}),
        (8, 131072, {"fuse": False}),
        (8, 131072, {"implementation": "reference"}),
    ],
)
def test_decode_runs_the_plan_it_returns(simulated_h200, batch, context, indexer):
    """The custom calls of `decode` lowered for CUDA (on a simulated H200) are the ones its
    `plan` names: a call for each fused layer (the sparse consumers' own), else none of them;
    and what it records for `dsv41_jax.info` is that plan."""
    cfg = dj.IndexerConfig()
    layers = (20, 24, 28, 32, 36)
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=layers[1:], **indexer)
    qs, cs, lens, table = inputs(cfg, batch, context)
    sp = ix.plan(qs, cs, table)
    step = jax.jit(lambda q, c, n, b: ix.decode(q, c, n, b).selections)
    text = step.trace(qs, cs, lens, table).lower(lowering_platforms=("cuda",)).as_text()
    calls = collections.Counter(re.findall(r"stablehlo\.custom_call @([\w$.]+)", text))
    plans = [p for _, p in sp.layers if p.fused]
    consumers = [p for p in plans if p.spec.role == "consumer"]
    assert calls[fused.SCHEDULE] == int(bool(plans))
    assert calls[fused.PUBLISH] == len(plans) - len(consumers)
    assert calls[fused.SPARSE_SELECT] == sum(p.route == "sparse" for p in consumers)
    assert calls[fused.DENSE_SELECT] == sum(p.route != "sparse" for p in consumers)
    assert lowered_selects(text) == planned_selects(sp)
    choices = info.explain(lambda q, c, n, b: ix.decode(q, c, n, b), qs, cs, lens, table)
    paths = [c.implementation for c in choices if c.op == "select: consumer path"]
    assert [p.split(" ")[0] for p in paths] == routes(sp)


def planned_selects(sp: StepPlan) -> list[tuple[str, list[int]]]:
    """(target, select attributes) of the fused calls the step plan `sp` names, in order."""
    code = {s: _ext.limit(f"select_{s}") for s in ("cluster", "filter", "short", "onchip")}
    fused_layers = [p for _, p in sp.layers if p.fused]
    out = []
    for p in fused_layers:
        if p.spec.role == "source":
            out.append((fused.PUBLISH, [code[p.top_select], code[p.blocks_select or "short"]]))
        else:
            target = fused.SPARSE_SELECT if p.route == "sparse" else fused.DENSE_SELECT
            out.append((target, [code[p.top_select]]))
    return out


def lowered_selects(text: str) -> list[tuple[str, list[int]]]:
    """(target, select attributes) of the fused calls in lowered StableHLO `text`, in order:
    `select` then `select_c`."""
    targets = {fused.PUBLISH, fused.SPARSE_SELECT, fused.DENSE_SELECT}
    attr = re.compile(
        r"(select\w*) = (?:dense<\[?([-\d, ]+)\]?> : tensor<(\d+)xi32>|(-?\d+) : i32)"
    )
    out = []
    for target, config in re.findall(r"custom_call @(\w+).*?backend_config = \{([^}]*)\}", text):
        if target not in targets:
            continue
        found = {name: (listed, n, one) for name, listed, n, one in attr.findall(config)}
        values = []
        for name in ("select", "select_c"):
            if name not in found:
                continue
            listed, n, one = found[name]
            if one:
                values.append(int(one))
            else:  # a dense array, printed as one value when every element is equal
                items = [int(x) for x in listed.split(",")]
                values += items if len(items) == int(n) else items * int(n)
        out.append((target, values))
    return out
