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

    def add(self, a, b):
        return arith.addi(self._v(a), self._v(b))

    def sub(self, a, b):
        return arith.subi(self._v(a), self._v(b))

    def mul(self, a, b):
        return arith.muli(self._v(a), self._v(b))

    def and_(self, a, b):
        return arith.andi(self._v(a), self._v(b))

    def or_(self, a, b):
        return arith.ori(self._v(a), self._v(b))

    def xor(self, a, b):
        return arith.xori(self._v(a), self._v(b))

    def shl(self, a, n: int):
        return arith.shli(self._v(a), self.c(n))

    def shr(self, a, n: int):
        return arith.shrui(self._v(a), self.c(n))

    def shlv(self, a, n):
        return arith.shli(self._v(a), self._v(n))

    def shrv(self, a, n):
        return arith.shrui(self._v(a), self._v(n))

    def popc(self, a):
        return mu.inline_ptx("popc.b32 $0, $1;", self._v(a), result_types=_i32())

    def fmax(self, a, b):
        f32 = ir.F32Type.get()
        m = arith.maxnumf(arith.bitcast(f32, self._v(a)), arith.bitcast(f32, self._v(b)))
        return arith.bitcast(_i32(), m)

    def minu(self, a, b):
        return arith.minui(self._v(a), self._v(b))

    def divu(self, a, n: int):
        return arith.divui(self._v(a), self.c(n))

    def remu(self, a, n: int):
        return arith.remui(self._v(a), self.c(n))

    def _cmp(self, pred, a, b):
        return arith.cmpi(pred, self._v(a), self._v(b))

    def eq(self, a, b):
        return self._cmp(arith.CmpIPredicate.eq, a, b)

    def ne(self, a, b):
        return self._cmp(arith.CmpIPredicate.ne, a, b)

    def lt(self, a, b):
        return self._cmp(arith.CmpIPredicate.ult, a, b)

    def le(self, a, b):
        return self._cmp(arith.CmpIPredicate.ule, a, b)

    def gt(self, a, b):
        return self._cmp(arith.CmpIPredicate.ugt, a, b)

    def ge(self, a, b):
        return self._cmp(arith.CmpIPredicate.uge, a, b)

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
