"""The timers of a profiled kernel (``tegrad.build(..., profile=True)``).

A profiled module holds one global table of counters, :class:`ProfileLayout` ``.symbol``:
``[rows x 2] i64``, per top-level statement of the kernel body (a stage, fused stages or
a product kernel's call) its nanoseconds and calls, then a last row for the whole
kernel. The kernel reads a monotonic clock (``clock_gettime(CLOCK_MONOTONIC)``, a vDSO
call of about 20 ns on Linux) between statements, keeps the readings in registers, and
adds them to the table only when the call succeeds: a call that fails (or stops at a
deferred rare branch and runs again) counts nothing, so the calls counted are the calls
returned from. The adds are atomic (``atomicrmw add``), so concurrent calls of one
function count every call; a parallel statement is a fork-join on the calling thread,
so its time on that thread is its wall time.

Nothing of this is emitted without profiling; :mod:`tegrad.codegen.runtime.profile`
reads the table.

>>> from llvmlite import ir
>>> m = ir.Module()
>>> layout = ProfileLayout("tegrad.k.profile", 3)
>>> table = layout.declare(m)
>>> str(table.value_type), layout.rows
('[4 x [2 x i64]]', 4)
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

from llvmlite import ir

from tegrad.ir.errors import TegradError
from tegrad.codegen.llvm.types import I32, I64

#: the host's id of its monotonic clock (``<time.h>``; 1 on Linux, 6 on macOS); profiled
#: code only runs in this process, so Python's value is the one its C library takes
CLOCK_MONOTONIC = getattr(time, "CLOCK_MONOTONIC", None)

#: the name of the function returning the clock in nanoseconds, in a profiled module
_NOW = "tegrad.monotonic_ns"


def check_profiling_supported(caller="build"):
    """Raise a ``TegradError`` unless this host can profile kernels: a C library with
    ``clock_gettime`` and a 64-bit ``struct timespec`` (two 64-bit words on 64-bit
    Linux and macOS)."""
    if CLOCK_MONOTONIC is None or ctypes.sizeof(ctypes.c_long) != 8:
        raise TegradError(f"{caller}: profile=True needs clock_gettime and a 64-bit C "
                          f"library (this host has neither a CLOCK_MONOTONIC or 64-bit longs)")


@dataclass(frozen=True)
class ProfileLayout:
    """The counter table of a profiled module: the global ``symbol``, ``statements``
    rows of statements, then one row for the whole kernel."""

    symbol: str
    statements: int

    @property
    def rows(self):
        return self.statements + 1

    def declare(self, module):
        """The table's global in ``module`` (zeroed; external, so the JIT finds it by
        name)."""
        ty = ir.ArrayType(ir.ArrayType(I64, 2), self.rows)
        table = ir.GlobalVariable(module, ty, name=self.symbol)
        table.initializer = ir.Constant(ty, None)
        table.align = 64  # its own cache line: the counters are written on every call
        return table

    def add(self, builder, table, row, nanoseconds, calls):
        """Emit atomic adds of ``nanoseconds`` and ``calls`` (i64 values) to ``row``."""
        for column, value in enumerate((nanoseconds, calls)):
            at = builder.gep(table, [ir.Constant(I32, 0), ir.Constant(I32, row),
                                     ir.Constant(I32, column)], inbounds=True,
                             source_etype=table.value_type)
            builder.atomic_rmw("add", at, value, "monotonic")


def monotonic_ns(module):
    """``i64 tegrad.monotonic_ns()`` in ``module`` (defined once): the monotonic clock in
    nanoseconds."""
    fn = module.globals.get(_NOW)
    if fn is not None:
        return fn
    timespec = ir.LiteralStructType([I64, I64])  # time_t tv_sec; long tv_nsec
    clock_gettime = module.globals.get("clock_gettime") or ir.Function(
        module, ir.FunctionType(I32, [I32, ir.PointerType()]), name="clock_gettime")
    fn = ir.Function(module, ir.FunctionType(I64, []), name=_NOW)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ts = b.alloca(timespec)
    b.call(clock_gettime, [ir.Constant(I32, CLOCK_MONOTONIC), ts])
    zero = ir.Constant(I32, 0)
    seconds, nanos = (b.load(b.gep(ts, [zero, ir.Constant(I32, k)], inbounds=True,
                                   source_etype=timespec), typ=I64) for k in (0, 1))
    b.ret(b.add(b.mul(seconds, ir.Constant(I64, 1_000_000_000)), nanos))
    return fn


__all__ = ["CLOCK_MONOTONIC", "ProfileLayout", "check_profiling_supported", "monotonic_ns"]
