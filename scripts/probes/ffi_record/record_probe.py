"""Does the FFI Record API work in this jaxlib, and what does it save? 16 independent custom calls
(each reads the parameter, writes its own output) as traced handlers vs record-stage handlers
(kernel node from PTX; D2D memcpy node); host wall per call with the outputs kept (every call's
outputs are new buffers, so every command is updated) and dropped; the stage counters.

    python scripts/probes/ffi_record/record_probe.py <dir holding record_probe.so>
"""

import ctypes
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

lib = ctypes.CDLL(f"{sys.argv[1]}/record_probe.so")
cap = jax.ffi.pycapsule
for name, sym in (
    ("probe_bootstrap", lib.ProbeBootstrap),
    ("probe_add_traced", lib.ProbeAddExecute),
    ("probe_copy_traced", lib.ProbeCopyExecute),
):
    jax.ffi.register_ffi_target(name, cap(sym), platform="CUDA")

counters = (ctypes.c_int64 * 5)()


def read():
    lib.ProbeCounters(counters)
    return list(counters)


lib.ProbeMessage.restype = ctypes.c_char_p
x = jnp.arange(1 << 16, dtype=jnp.float32)
out = jax.ShapeDtypeStruct(x.shape, x.dtype)
jax.block_until_ready(jax.jit(lambda v: jax.ffi.ffi_call("probe_bootstrap", out)(v))(x))
c = read()
print(f"OK bootstrap: runs {c[3]} error {c[4]} message {lib.ProbeMessage().decode()!r}")


def fan(target, n=16):
    call = jax.ffi.ffi_call(target, out)
    return jax.jit(lambda v: [call(v) for _ in range(n)])


def wall(f, keep, n=50):
    t = time.perf_counter()
    if keep:
        res = [f(x) for _ in range(n)]
    else:
        for _ in range(n):
            res = f(x)
    jax.block_until_ready(res)
    return (time.perf_counter() - t) / n * 1e6


rows = {}
for target in ("probe_add_traced", "probe_add_record", "probe_copy_traced", "probe_copy_record"):
    try:
        f = fan(target)
        got = np.asarray(f(x)[3])
        want = np.asarray(x) + (1 if "add" in target else 0)
        ok = np.array_equal(got, want)
        for _ in range(5):
            jax.block_until_ready(f(x))
        rows[target] = (f, ok)
    except Exception as e:  # noqa: BLE001 - a probe reports what failed
        print(f"FAIL {target}: {type(e).__name__}: {str(e)[:300]}")
trivial = jax.jit(lambda v: v + 1)
rows["trivial jit"] = (trivial, True)
res = {k: {"kept": [], "dropped": []} for k in rows}
for _ in range(5):  # interleaved repeats
    for name, (f, _) in rows.items():
        for keep in ("kept", "dropped"):
            before = read()
            res[name][keep].append(
                (wall(f, keep == "kept"), [a - b for a, b in zip(read(), before)])
            )
for name, (_f, ok) in rows.items():
    k = res[name]["kept"]
    d = res[name]["dropped"]
    per = [v / 50 for v in k[-1][1][:3]]
    print(
        f"TIME {name}: correct {ok} | host µs/call kept {statistics.median(t for t, _ in k):.1f} "
        f"(min {min(t for t, _ in k):.1f}) dropped {statistics.median(t for t, _ in d):.1f} | "
        f"per call (kept): executes {per[0]:.1f} creates {per[1]:.1f} updates {per[2]:.1f}"
    )
