"""The indexer step on the GPU: run as XLA command buffers (CUDA graphs) it equals the step with
command buffers off, also when captured at a larger batch than the warm-up. That capture happened
is read from XLA's own log lines (the conversion pass names the thunks it put into command
buffers; the command-buffer thunk logs every execution), not inferred from equal digests."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "decode_step_digest.py")
MODES = {
    "off": "--xla_gpu_enable_command_buffer=",
    "default": "",  # XLA's defaults (command buffers on, with a minimum graph size)
    "forced": "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1",
}
MODULE = "jit_indexer_step"


def run(flags: str, path: str) -> dict[str, dict]:
    env = dict(
        os.environ,
        XLA_FLAGS=flags,
        TF_CPP_MIN_LOG_LEVEL="0",
        TF_CPP_VMODULE="command_buffer_conversion_pass=3,command_buffer_thunk=3",
    )
    p = subprocess.run(
        [sys.executable, SCRIPT, "--path", path], env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-3000:]
    # The thunks the conversion pass put into command buffers, in the step's module only.
    captured, module = [], None
    for line in p.stderr.splitlines():
        m = re.search(r"Module (\S+) CommandBufferConfig", line)
        if m:
            module = m.group(1)
        m = re.search(r"Creating command buffer thunk with the following thunks: (.*)", line)
        if m and module == MODULE:
            captured.append(m.group(1))
    out = {}
    for batch, digest in re.findall(r"batch (\d+) digest (\w+)", p.stdout):
        section = p.stderr.split(f"== batch {batch} start")[1].split(f"== batch {batch} end")[0]
        out[batch] = dict(
            digest=digest,
            executions=len(re.findall(r"Execute command buffer", section)),
            captured=captured,
        )
    return out


@pytest.mark.parametrize("path", ["auto", "mask"])
def test_step_as_command_buffers_equals_uncaptured(path):
    results = {mode: run(flags, path) for mode, flags in MODES.items()}
    for mode, res in results.items():
        assert set(res) == {"4", "8"}, mode
    for batch in ("4", "8"):
        off = results["off"][batch]
        assert off["executions"] == 0 and not off["captured"], "command buffers were off"
        for mode in ("default", "forced"):
            got = results[mode][batch]
            assert got["captured"], f"{mode}: XLA put none of the step's thunks in a command buffer"
            assert got["executions"] > 0, f"{mode}: no command buffer ran in batch {batch}"
            assert got["digest"] == off["digest"], f"{mode}, batch {batch}: results differ"


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
