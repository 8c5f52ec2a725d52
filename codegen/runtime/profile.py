"""Where a compiled function spends its time: ``tg.build(..., profile=True)`` and
``f.profile()``.

A profiled function times each top-level statement of its kernel (a stage, several
fused stages, or a product kernel's call: the statements ``f.schedule`` lists, in the
same order) and the whole kernel call on every call (see
:mod:`tegrad.codegen.llvm.profiling`). ``f.profile()`` is a :class:`Profile` of the
counts so far: per statement, its stages, calls, total seconds, seconds per call, share
of the kernel's time, GFLOP/s and bytes moved per call; ``str()`` of it is a table, the
most expensive statement first.

The counts are exact (a call that raises counts nothing); the other columns are
estimates: ``flops`` are the floating-point operations of the statement's loop nest
(its trip counts times the float operations of each body: arithmetic, intrinsic calls
and accumulations; a loop whose bounds vary counts its largest trip count) or its
product kernel's ``2 m n k``; ``bytes`` are the bytes of every buffer the statement
reads or writes, each once (its own local buffers left out), what it moves at the least
when none of it is in cache. Calls from several threads are counted atomically.

Without ``profile=True`` nothing is compiled in and calls cost nothing more; exports
(``f.export``, ``tg.export``) are never profiled: they compile the program again,
without timers.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((64,), dtype="float64", name="x")
>>> y = tg.compute((64,), lambda i: x[i] * 2.0, name="y")
>>> z = tg.compute((64,), lambda i: y[i] + y[63 - i], name="z")
>>> f = tg.build([x], [z], profile=True)
>>> for _ in range(3):
...     _ = f(np.ones(64))
>>> p = f.profile()
>>> [(row.stages, row.calls, row.flops, row.bytes) for row in p.rows]
[(('y',), 3, 64, 1024), (('z',), 3, 64, 1024)]
>>> p.total.calls, 0 < sum(row.share for row in p.rows) <= 1
(3, True)
>>> p.reset(); f.profile().total.calls
0
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np

from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import TegradError
from tegrad.ir.expr import Binary, Call, Neg
from tegrad.codegen.loops.mapper import buffers_of, stmt_exprs, walk_expr
from tegrad.codegen.loops.nodes import Accumulate, MatrixProduct, Stmt
from tegrad.codegen.llvm.emit import top_statements
from tegrad.codegen.llvm.profiling import check_profiling_supported
from tegrad.codegen.schedule.fusion import stage_names
from tegrad.codegen.schedule.parallel import loop_work


def check_profile_option(profile, caller="build"):
    """``profile`` as a bool, checked (a TegradError for anything but a bool, or for
    True on a host that cannot profile)."""
    if not isinstance(profile, bool):
        raise TegradError(f"{caller}: profile must be True or False, got {profile!r}")
    if profile:
        check_profiling_supported(caller)
    return profile


class Row(NamedTuple):
    """One statement of a profiled kernel (see the module doc); ``index`` is its place
    among the kernel's top-level statements, ``stages`` the tensors it computes."""

    index: int
    stages: tuple
    calls: int
    seconds: float
    per_call: float
    share: float
    flops: int
    gflops: float
    bytes: int

    @property
    def label(self):
        return ", ".join(self.stages) or f"statement {self.index}"


class Total(NamedTuple):
    """The whole kernel: its calls and the seconds they took."""

    calls: int
    seconds: float

    @property
    def per_call(self):
        return self.seconds / self.calls if self.calls else 0.0


def _float_ops(node):
    """The float operations of a statement (not its children) or of an expression: its
    arithmetic and intrinsic calls, each distinct node once (the code computes a shared
    sub-expression once), an accumulation's combine, a product's ``2 m n k``."""
    if type(node) is MatrixProduct:
        return node.spec.flops
    exprs = stmt_exprs(node) if isinstance(node, Stmt) else (node,)
    seen, n = set(), 0
    for e in exprs:
        for sub in walk_expr(e):
            if id(sub) not in seen and type(sub) in (Binary, Neg, Call) \
                    and _dt.is_float(sub.dtype):
                n += 1
            seen.add(id(sub))
    if type(node) is Accumulate and _dt.is_float(node.buffer.dtype):
        n += 1
    return n


def statement_flops(stmt):
    """The float operations of one execution of ``stmt`` (see the module doc).

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
    >>> A, B = Buffer("A", (8,), "float32", "input"), Buffer("B", (8,), "float32", "output")
    >>> i = Var("i", "int64")
    >>> statement_flops(For(i, Const(0, "int64"), Const(8, "int64"),
    ...                     Store(B, (i,), Load(A, (i,)) * 2.0 + 1.0)))
    16
    """
    return loop_work(stmt, count=_float_ops)


def statement_bytes(stmt):
    """The bytes of the buffers ``stmt`` reads or writes (not those it allocates), each
    once."""
    used, allocated = buffers_of(stmt)
    return sum(b.size * np.dtype("uint8" if b.dtype == "bool" else b.dtype).itemsize
               for b in used if b not in allocated)


def _counters(executable):
    """The counter table (``[statements + 1, 2]`` int64: nanoseconds, calls) of every
    module the executable has run, added up; also each table's address and size."""
    total, tables = None, []
    for loaded, layout in executable.profiled:
        address = loaded.global_address(layout.symbol)
        words = (ctypes.c_int64 * (2 * layout.rows)).from_address(address)
        table = np.ctypeslib.as_array(words).reshape(layout.rows, 2).copy()
        total = table if total is None else total + table
        tables.append((address, ctypes.sizeof(words)))
    return total, tables


class Profile:
    """The profile of a compiled function (module doc): :attr:`rows` (a :class:`Row`
    per top-level statement, in the kernel's order), :attr:`total` (the kernel's calls
    and seconds); ``str()`` a table sorted by time; :meth:`reset` zeroes the counters."""

    def __init__(self, executable):
        self._executable = executable
        counts, self._tables = _counters(executable)
        stmts = top_statements(executable.kernel.body)
        self.total = Total(int(counts[-1, 1]), int(counts[-1, 0]) * 1e-9)
        rows = []
        for k, s in enumerate(stmts):
            seconds, calls = int(counts[k, 0]) * 1e-9, int(counts[k, 1])
            flops = statement_flops(s)
            rows.append(Row(k, stage_names(s), calls, seconds,
                            seconds / calls if calls else 0.0,
                            seconds / self.total.seconds if self.total.seconds else 0.0,
                            flops, flops * calls / seconds * 1e-9 if seconds else 0.0,
                            statement_bytes(s)))
        self.rows = rows

    def reset(self):
        """Zero the function's counters (a call running meanwhile may count in part)."""
        for address, size in self._tables:
            ctypes.memset(address, 0, size)

    def __str__(self):
        header = (f"{'stage(s)':<40} {'calls':>7} {'total ms':>10} {'us/call':>10} "
                  f"{'share':>6} {'GFLOP/s':>8} {'MB/call':>8}")
        lines = [header]
        for r in sorted(self.rows, key=lambda r: -r.seconds):
            label = r.label if len(r.label) <= 40 else r.label[:37] + "..."
            lines.append(f"{label:<40} {r.calls:>7} {r.seconds * 1e3:>10.3f} "
                         f"{r.per_call * 1e6:>10.1f} {r.share:>6.1%} {r.gflops:>8.2f} "
                         f"{r.bytes / 2**20:>8.2f}")
        t = self.total
        covered = sum(r.seconds for r in self.rows) / t.seconds if t.seconds else 0.0
        lines.append(f"{'kernel (whole call)':<40} {t.calls:>7} {t.seconds * 1e3:>10.3f} "
                     f"{t.per_call * 1e6:>10.1f} {covered:>6.1%}")
        return "\n".join(lines)

    def __repr__(self):
        return f"<Profile of {len(self.rows)} statements, {self.total.calls} calls>"


def profile_of(executable):
    """The :class:`Profile` of a profiled executable (a TegradError for another)."""
    if not executable.profiled:
        raise TegradError(f"profile: {executable.kernel.name!r} was built without "
                          f"profiling; build it with tg.build(..., profile=True)")
    return Profile(executable)


__all__ = ["Profile", "Row", "Total", "check_profile_option", "profile_of",
           "statement_bytes", "statement_flops"]
