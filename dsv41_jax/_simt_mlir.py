"""The GPU backend of `dsv41_jax._simt`: each instruction of a SIMT program becomes MLIR (arith,
scf, NVVM, inline PTX) inside `plgpu.inline_mgpu`, so the program runs as the body of a
`plgpu.kernel` under Lane lowering semantics (one CUDA thread per program thread).

Global memory is read with non-coherent loads (`ld.global.nc`: the inputs do not change while a
kernel runs) and written with plain stores, through the `cvta.to.global` address of each buffer;
shared memory is one int32 scratch buffer addressed in words. Values are i32, predicates i1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu, llvm, nvvm, scf

from dsv41_jax._pallas import mosaic_utils as mu


def _i32():
    return ir.IntegerType.get_signless(32)


def _i64():
    return ir.IntegerType.get_signless(64)


def _two(op: Callable[[Any, Any], Any]):
    """An `Mlir` method emitting `op` of two i32 values (an int: a constant)."""
    return lambda self, a, b: op(self._v(a), self._v(b))


def _by_constant(op: Callable[[Any, Any], Any]):
    """An `Mlir` method emitting `op` of an i32 value and an int constant."""
    return lambda self, a, n: op(self._v(a), self.c(n))


def _compare(pred: Any):
    """An `Mlir` method comparing two i32 values (an int: a constant) to an i1 predicate."""
    return lambda self, a, b: arith.cmpi(pred, self._v(a), self._v(b))


class Mlir:
    """Emits a SIMT program into the current insertion point. `refs` maps buffer names to the
    kernel's GMEM memrefs, `smem` is the int32 shared-memory scratch memref."""

    def __init__(self, refs: dict[str, Any], smem: Any):
        self.refs = refs
        self._global_base: dict[str, Any] = {}
        self._smem = llvm.ptrtoint(_i32(), mu.memref_ptr(smem))

    # ---- values
    def c(self, x: int):
        x %= 2**32
        return mu.c(x - 2**32 if x >= 2**31 else x, _i32())

    def _v(self, x):
        return self.c(x) if isinstance(x, int) else x

    def tid(self):
        return arith.index_cast(_i32(), gpu.thread_id(gpu.Dimension.x))

    def cta(self):
        return arith.index_cast(_i32(), gpu.block_id(gpu.Dimension.x))

    # Two values (an int is a constant), or a value and an int constant, to one value; an
    # unsigned comparison of two values to a predicate.
    add, sub, mul = _two(arith.addi), _two(arith.subi), _two(arith.muli)
    and_, or_, xor, minu = _two(arith.andi), _two(arith.ori), _two(arith.xori), _two(arith.minui)
    shlv, shrv = _two(arith.shli), _two(arith.shrui)  # `n` a value in [0, 32)
    shl, shr = _by_constant(arith.shli), _by_constant(arith.shrui)
    divu, remu = _by_constant(arith.divui), _by_constant(arith.remui)
    eq, ne = _compare(arith.CmpIPredicate.eq), _compare(arith.CmpIPredicate.ne)
    lt, le = _compare(arith.CmpIPredicate.ult), _compare(arith.CmpIPredicate.ule)
    gt, ge = _compare(arith.CmpIPredicate.ugt), _compare(arith.CmpIPredicate.uge)

    def popc(self, a):
        return mu.inline_ptx("popc.b32 $0, $1;", self._v(a), result_types=_i32())

    def fmax(self, a, b):
        f32 = ir.F32Type.get()
        m = arith.maxnumf(arith.bitcast(f32, self._v(a)), arith.bitcast(f32, self._v(b)))
        return arith.bitcast(_i32(), m)

    def pand(self, p, q):
        return arith.andi(p, q)

    def por(self, p, q):
        return arith.ori(p, q)

    def pnot(self, p):
        return arith.xori(p, mu.c(1, ir.IntegerType.get_signless(1)))

    def sel(self, p, a, b):
        return arith.select(p, self._v(a), self._v(b))

    # ---- global memory
    def _addr(self, name: str, idx):
        if name not in self._global_base:
            generic = llvm.ptrtoint(_i64(), mu.memref_ptr(self.refs[name]))
            self._global_base[name] = mu.inline_ptx(
                "cvta.to.global.u64 $0, $1;", generic, result_types=_i64()
            )
        offset = arith.muli(arith.extui(_i64(), self._v(idx)), mu.c(4, _i64()))
        return arith.addi(self._global_base[name], offset)

    def ldg(self, name: str, idx):
        return mu.inline_ptx(
            "ld.global.nc.u32 $0, [$1];", self._addr(name, idx), result_types=_i32()
        )

    def ldg4(self, name: str, idx):
        return list(
            mu.inline_ptx(
                "ld.global.nc.v4.u32 {$0, $1, $2, $3}, [$4];",
                self._addr(name, idx),
                result_types=[_i32()] * 4,
            )
        )

    def ldg_if(self, name: str, idx, p):
        return mu.inline_ptx(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.u32 $0, 0; @p ld.global.nc.u32 $0, [$1]; }",
            self._addr(name, idx),
            arith.extui(_i32(), p),
            result_types=_i32(),
        )

    def stg(self, name: str, idx, val, p):
        mu.inline_ptx("st.global.u32 [$0], $1;", self._addr(name, idx), self._v(val), predicate=p)

    # ---- shared memory
    def _saddr(self, off):
        return arith.addi(self._smem, arith.muli(self._v(off), self.c(4)))

    def lds(self, off):
        return mu.inline_ptx(
            "ld.shared.u32 $0, [$1];", self._saddr(off), result_types=_i32(), has_side_effects=True
        )

    def sts(self, off, val, p=None):
        mu.inline_ptx("st.shared.u32 [$0], $1;", self._saddr(off), self._v(val), predicate=p)

    def red_add(self, off, val, p=None):
        mu.inline_ptx("red.shared.add.u32 [$0], $1;", self._saddr(off), self._v(val), predicate=p)

    def red_or(self, off, val, p=None):
        mu.inline_ptx("red.shared.or.b32 [$0], $1;", self._saddr(off), self._v(val), predicate=p)

    def barrier(self):
        mu.inline_ptx("bar.sync 0;", has_side_effects=True, convergent=True)

    # ---- warps
    def shfl_up(self, v, d: int):
        return nvvm.shfl_sync(mu.c(-1, _i32()), self._v(v), self.c(d), self.c(0), nvvm.ShflKind.up)

    def shfl_idx(self, v, src):
        return nvvm.shfl_sync(
            mu.c(-1, _i32()), self._v(v), self._v(src), self.c(0x1F), nvvm.ShflKind.idx
        )

    # ---- control
    def if_(
        self, p, then: Callable[[], Sequence[Any]], orelse: Callable[[], Sequence[Any]], n: int
    ):
        op = scf.IfOp(p, [_i32()] * n, has_else=True)  # type: ignore[call-arg]  # stub lags
        with ir.InsertionPoint(op.then_block):
            scf.yield_([self._v(x) for x in then()])
        with ir.InsertionPoint(op.else_block):
            scf.yield_([self._v(x) for x in orelse()])
        return list(op.results)
