"""The indexer step on the GPU: captured into CUDA graphs (XLA command buffers) it equals the
uncaptured step, also when captured at a larger batch than the warm-up; the capture is proven
from the device trace (CUDA graph launches / kernels run as graph nodes), not inferred from
equal digests."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "decode_step_digest.py")
OFF = "--xla_gpu_enable_command_buffer="
ON = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"


def run(flags: str, path: str) -> dict[str, tuple[int, str]]:
    env = dict(os.environ, XLA_FLAGS=flags)
    p = subprocess.run(
        [sys.executable, SCRIPT, "--path", path], env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-3000:]
    graphs = {
        b: int(launches) + int(nodes)
        for b, launches, nodes in re.findall(
            r"batch (\d+) graph launches (\d+) graph kernels (\d+)", p.stdout
        )
    }
    dig = dict(re.findall(r"batch (\d+) digest (\w+)", p.stdout))
    return {b: (graphs[b], dig[b]) for b in dig}


@pytest.mark.xfail(
    strict=True,
    reason="H200 run 8 (jax 0.11.2, 2026-11-30): with these XLA flags the step's trace showed no "
    "CUDA graph launch and no kernel run as a graph node (0 of 37); either XLA formed no command "
    "buffer or CUPTI-through-torch does not show it. Not established which: see the closing note",
)
@pytest.mark.parametrize("path", ["auto"])
def test_step_captured_equals_uncaptured(path):
    pytest.importorskip("torch")  # CUPTI records through torch.profiler prove the capture
    plain, graphs = run(OFF, path), run(ON, path)
    assert set(plain) == set(graphs) == {"4", "8"}
    for batch in plain:
        assert plain[batch][0] == 0, "command buffers were off: no CUDA graph expected"
        assert graphs[batch][0] > 0, "no CUDA graph launch or graph kernel in the step's trace"
        assert plain[batch][1] == graphs[batch][1], f"batch {batch}: captured step differs"


def test_step_equals_its_composition_on_gpu(rng):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from factories import paged_cache, query

    import dsv41_jax as dj

    cfg = dj.IndexerConfig(index_topk=64, candidate_topk_blocks=32)
    indexer = dj.make_two_level_indexer(
        cfg, source_layer=20, consumer_layers=(24, 28), plain_layers=(1,)
    )
    caches, queries = {}, {}
    cache, bt = paged_cache(rng, 6, 24, 64, 128)
    for layer in indexer.layers:
        caches[layer], _ = paged_cache(rng, 6, 24, 64, 128)
        queries[layer] = query(rng, 6, 1, 32, 128)
    lens = jnp.asarray(np.array([0, 1, 255, 257, 1000, 24 * 64], np.int32))
    got = jax.jit(lambda *a: indexer.decode(*a, physical=True))(queries, caches, lens, bt)
    top, table = dj.publish(queries[20], caches[20], lens, bt, cfg)
    np.testing.assert_array_equal(np.asarray(got.selections[20]), np.asarray(top))
    for layer in (24, 28):
        want = dj.select(queries[layer], caches[layer], lens, bt, table, cfg)
        np.testing.assert_array_equal(np.asarray(got.selections[layer]), np.asarray(want))
    dense = dj.topk(dj.paged_mqa_logits(queries[1], caches[1], lens, bt), lens, 64)
    np.testing.assert_array_equal(np.asarray(got.selections[1]), np.asarray(dense))
    slots = dj.logical_to_physical(got.selections[24], bt, 64, implementation="reference")
    np.testing.assert_array_equal(np.asarray(got.physical[24]), np.asarray(slots))
