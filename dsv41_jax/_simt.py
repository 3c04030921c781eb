"""SIMT programs for the Pallas Mosaic GPU selects, and a CPU emulator that runs them.

Mosaic GPU has no histogram, scan or scatter primitive, so the selects are written as SIMT
programs: Python functions that call a small instruction set on a backend `b` (every CUDA
thread of a CTA runs the same instructions on its own values). Two backends implement it:

- `dsv41_jax._simt_mlir.Mlir` emits the instructions as MLIR (arith, scf, NVVM and inline PTX)
  inside `plgpu.inline_mgpu`, in a `plgpu.kernel` of 1024 threads (the GPU path);
- `Emulator` (here) runs them on the CPU with numpy, all threads of all CTAs in lockstep, and
  checks what the GPU would not tell: every global access in bounds, no shared-memory word read
  before it is written, no two threads touching a word between two barriers unless both add
  atomically (a race), branches uniform over each CTA. Interpret mode cannot run
  `inline_mgpu`; this is how CI runs the selects' logic, and with mutants, how it shows the
  tests can fail.

The instruction set (all values unsigned 32-bit, wrapping; predicates are booleans):
  c(x) tid() cta() | add sub mul and_ or_ xor shl shr (static shifts) shlv shrv popc minu
  fmax (float32 bits) divu remu (static divisors) | eq ne lt le gt ge (unsigned) pand por pnot
  sel | ldg ldg4 ldg_if stg (global memory, in 32-bit words of a named buffer) | lds sts
  red_add red_or (shared memory, in words) | barrier | shfl_up shfl_idx (within a warp) | if_
  (a branch uniform over the CTA, with results).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

U32 = np.uint32
_NONE, _MANY, _ATOMIC = -1, -2, -3  # word-access owners besides a thread id


class EmulationError(AssertionError):
    """What a sanitizer would report on the GPU: an out-of-bounds access, a read of unwritten
    shared memory, a race between two threads, or a branch not uniform over a CTA."""


class Emulator:
    """Runs a SIMT program over `ctas` CTAs of `threads` threads in lockstep.

    `buffers` maps names to flat numpy arrays of 32-bit words (inputs and outputs; outputs are
    written in place). `smem_words` sizes each CTA's shared memory, which starts as garbage.
    """

    def __init__(
        self, ctas: int, threads: int, smem_words: int, buffers: dict[str, np.ndarray], seed=0
    ):
        self.g, self.t = ctas, threads
        self.buffers = {n: b.view(U32) for n, b in buffers.items()}
        rng = np.random.default_rng(seed)
        self.smem = rng.integers(0, 2**32, (ctas, smem_words), dtype=np.uint64).astype(U32)
        self.written = np.zeros((ctas, smem_words), bool)
        # Per word: who wrote / read it since the last barrier, and in which epoch.
        self.w_epoch = np.full((ctas, smem_words), -1, np.int64)
        self.w_tid = np.full((ctas, smem_words), _NONE, np.int64)
        self.r_epoch = np.full((ctas, smem_words), -1, np.int64)
        self.r_tid = np.full((ctas, smem_words), _NONE, np.int64)
        self.epoch = 0
        self.active = np.ones((ctas, 1), bool)  # CTAs on the branch being run
        self.stores: dict[str, np.ndarray] = {}  # per buffer, how often each word was stored
        self.tids = np.broadcast_to(np.arange(threads, dtype=np.int64), (ctas, threads))

    # ---- values
    def _v(self, x) -> np.ndarray:
        a = np.asarray(x)
        if a.dtype == bool:
            raise TypeError("a predicate where a value was expected")
        return np.broadcast_to(a.astype(U32) if a.dtype != U32 else a, (self.g, self.t))

    def _p(self, p) -> np.ndarray:
        a = np.asarray(p)
        if a.dtype != bool:
            raise TypeError("a value where a predicate was expected")
        return np.broadcast_to(a, (self.g, self.t))

    def c(self, x: int):
        return self._v(np.asarray(x % 2**32, dtype=np.uint64).astype(U32))

    def tid(self):
        return self._v(np.arange(self.t, dtype=U32)[None])

    def cta(self):
        return self._v(np.arange(self.g, dtype=U32)[:, None])

    def add(self, a, b):
        return self._v(a) + self._v(b)

    def sub(self, a, b):
        return self._v(a) - self._v(b)

    def mul(self, a, b):
        return self._v(a) * self._v(b)

    def and_(self, a, b):
        return self._v(a) & self._v(b)

    def or_(self, a, b):
        return self._v(a) | self._v(b)

    def xor(self, a, b):
        return self._v(a) ^ self._v(b)

    def shl(self, a, n: int):
        assert 0 <= n < 32
        return self._v(a) << U32(n)

    def shr(self, a, n: int):
        assert 0 <= n < 32
        return self._v(a) >> U32(n)

    def shlv(self, a, n):
        """`a << n` for a value `n` in [0, 32)."""
        n = self._v(n)
        if (n[self._mask()] >= 32).any():
            raise EmulationError("a shift by 32 or more (undefined on the GPU)")
        return self._v(a) << (n & U32(31))

    def shrv(self, a, n):
        """`a >> n` (logical) for a value `n` in [0, 32)."""
        n = self._v(n)
        if (n[self._mask()] >= 32).any():
            raise EmulationError("a shift by 32 or more (undefined on the GPU)")
        return self._v(a) >> (n & U32(31))

    def popc(self, a):
        return np.bitwise_count(self._v(a)).astype(U32)

    def fmax(self, a, b):
        """The larger of two float32 values given as bits; NaN only when both are NaN."""
        f = np.fmax(self._v(a).view(np.float32), self._v(b).view(np.float32))
        return f.view(U32)

    def minu(self, a, b):
        return np.minimum(self._v(a), self._v(b))

    def divu(self, a, n: int):
        return self._v(a) // U32(n)

    def remu(self, a, n: int):
        return self._v(a) % U32(n)

    def eq(self, a, b):
        return self._v(a) == self._v(b)

    def ne(self, a, b):
        return self._v(a) != self._v(b)

    def lt(self, a, b):
        return self._v(a) < self._v(b)

    def le(self, a, b):
        return self._v(a) <= self._v(b)

    def gt(self, a, b):
        return self._v(a) > self._v(b)

    def ge(self, a, b):
        return self._v(a) >= self._v(b)

    def pand(self, p, q):
        return self._p(p) & self._p(q)

    def por(self, p, q):
        return self._p(p) | self._p(q)

    def pnot(self, p):
        return ~self._p(p)

    def sel(self, p, a, b):
        return np.where(self._p(p), self._v(a), self._v(b))

    # ---- global memory
    def _mask(self, p=None):
        m = np.broadcast_to(self.active, (self.g, self.t))
        return m if p is None else m & self._p(p)

    def _global(self, name: str, idx, p, width: int):
        buf, idx, m = self.buffers[name], self._v(idx).astype(np.int64), self._mask(p)
        if width > 1 and (idx[m] % width).any():
            raise EmulationError(f"{name}: a {4 * width}-byte access not {4 * width}-byte aligned")
        bad = m & ((idx < 0) | (idx + width > buf.size))
        if bad.any():
            g, t = np.argwhere(bad)[0]
            raise EmulationError(
                f"{name}: out-of-bounds access of word {idx[g, t]} (size {buf.size}) by CTA "
                f"{g} thread {t}"
            )
        return buf, np.where(m, idx, 0), m

    def ldg(self, name: str, idx):
        buf, i, _ = self._global(name, idx, None, 1)
        return buf[i]

    def ldg4(self, name: str, idx):
        buf, i, _ = self._global(name, idx, None, 4)
        return [buf[i + j] for j in range(4)]

    def ldg_if(self, name: str, idx, p):
        """A load by the threads where `p` holds (0 elsewhere; nothing read there)."""
        buf, i, m = self._global(name, idx, p, 1)
        return np.where(m, buf[i], U32(0))

    def stg(self, name: str, idx, val, p):
        buf, i, m = self._global(name, idx, p, 1)
        flat = i[m]
        if len(np.unique(flat)) != len(flat):
            raise EmulationError(f"{name}: two threads store to one word in one instruction")
        buf[flat] = self._v(val)[m]
        np.add.at(self.stores.setdefault(name, np.zeros(buf.size, np.int64)), flat, 1)

    # ---- shared memory, with the race and initialisation checks
    def _shared(self, off, p):
        off, m = self._v(off).astype(np.int64), self._mask(p)
        words = self.smem.shape[1]
        bad = m & ((off < 0) | (off >= words))
        if bad.any():
            g, t = np.argwhere(bad)[0]
            raise EmulationError(f"shared word {off[g, t]} out of bounds (CTA {g} thread {t})")
        g, t = np.nonzero(m)
        return g, off[g, t], self.tids[g, t]

    def _race(self, what: str, bad, g, w, t):
        if bad.any():
            i = np.flatnonzero(bad)[0]
            raise EmulationError(
                f"race: {what} of shared word {w[i]} by thread {t[i]} of CTA {g[i]} between the "
                f"same two barriers as another thread's access"
            )

    def lds(self, off):
        g, w, t = self._shared(off, None)
        if not self.written[g, w].all():
            i = np.flatnonzero(~self.written[g, w])[0]
            raise EmulationError(f"read of unwritten shared word {w[i]} (CTA {g[i]})")
        wrote = (self.w_epoch[g, w] == self.epoch) & (self.w_tid[g, w] != t)
        self._race("read", wrote, g, w, t)
        # The readers of a word since the last barrier: one thread id, or _MANY.
        key = g * self.smem.shape[1] + w
        uniq, counts = np.unique(key, return_counts=True)
        reader = np.where(np.isin(key, uniq[counts > 1]), _MANY, t)
        other = (self.r_epoch[g, w] == self.epoch) & (self.r_tid[g, w] != t)
        self.r_tid[g, w] = np.where(other, _MANY, reader)
        self.r_epoch[g, w] = self.epoch
        out = np.zeros((self.g, self.t), U32)
        out[g, t] = self.smem[g, w]
        return out

    def sts(self, off, val, p=None):
        g, w, t = self._shared(off, p)
        key = g * self.smem.shape[1] + w
        if len(np.unique(key)) != len(key):
            raise EmulationError("race: two threads store to one shared word in one instruction")
        wrote = (self.w_epoch[g, w] == self.epoch) & (self.w_tid[g, w] != t)
        read = (self.r_epoch[g, w] == self.epoch) & (self.r_tid[g, w] != t)
        self._race("store", wrote | read, g, w, t)
        self.smem[g, w] = self._v(val)[self._mask(p)]
        self.written[g, w] = True
        self.w_epoch[g, w], self.w_tid[g, w] = self.epoch, t

    def _red(self, off, val, p, op):
        g, w, t = self._shared(off, p)
        if not self.written[g, w].all():
            i = np.flatnonzero(~self.written[g, w])[0]
            raise EmulationError(f"atomic on unwritten shared word {w[i]} (CTA {g[i]})")
        plain = (self.w_epoch[g, w] == self.epoch) & (self.w_tid[g, w] != _ATOMIC)
        plain &= self.w_tid[g, w] != t
        read = (self.r_epoch[g, w] == self.epoch) & (self.r_tid[g, w] != t)
        self._race("atomic", plain | read, g, w, t)
        op.at(self.smem, (g, w), self._v(val)[self._mask(p)])
        self.w_epoch[g, w], self.w_tid[g, w] = self.epoch, _ATOMIC

    def red_add(self, off, val, p=None):
        self._red(off, val, p, np.add)

    def red_or(self, off, val, p=None):
        self._red(off, val, p, np.bitwise_or)

    def barrier(self):
        self.epoch += 1

    # ---- warps
    def _lanes(self, v):
        return self._v(v).reshape(self.g, self.t // 32, 32)

    def shfl_up(self, v, d: int):
        x = self._lanes(v)
        y = np.concatenate([x[..., :d], x[..., :-d]], axis=-1)  # lanes below d keep their own
        return y.reshape(self.g, self.t)

    def shfl_idx(self, v, src):
        x, s = self._lanes(v), self._lanes(src)
        if (s >= 32).any():
            raise EmulationError("shfl_idx from a lane >= 32")
        return np.take_along_axis(x, s.astype(np.int64), axis=-1).reshape(self.g, self.t)

    # ---- control
    def if_(
        self, p, then: Callable[[], Sequence[Any]], orelse: Callable[[], Sequence[Any]], n: int
    ):
        """Runs `then` where `p` holds (uniform over each CTA), else `orelse`; each returns `n`
        values, and the result is the taken branch's."""
        p = self._p(p)
        on = np.broadcast_to(self.active, p.shape)
        rows = p[:, :1]
        if (on & (p != rows)).any():
            raise EmulationError("a branch condition differs between threads of one CTA")
        saved = self.active
        self.active = saved & rows
        a = [np.array(x) for x in then()]
        self.active = saved & ~rows
        b = [np.array(x) for x in orelse()]
        self.active = saved
        if len(a) != n or len(b) != n:
            raise TypeError(f"the branches of if_ must return {n} values")
        return [np.where(rows, self._v(x), self._v(y)) for x, y in zip(a, b)]
