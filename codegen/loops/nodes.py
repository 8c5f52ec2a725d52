"""Nodes of the loop-nest IR: what a compiled function does, loop by loop.

A :class:`Kernel` owns its :class:`Buffer` s (arguments and temporaries) and a body of
statements. Expressions inside statements are ordinary tegrad expressions
(:mod:`tegrad.ir.expr`), except that an element of a buffer is read with :class:`Load`
(tegrad's ``Read`` names a tensor; after lowering every tensor is a buffer). Loop variables
are tegrad ``Var`` s of dtype ``int64``.

Every node is immutable and hashable (structural equality, like tegrad's expressions), so
schedule transformations are pure functions from nodes to new nodes.

>>> from tegrad.ir.expr import Var
>>> A = Buffer("A", (4,), "float32", "input")
>>> B = Buffer("B", (4,), "float32", "output")
>>> i = Var("i", "int64")
>>> body = For(i, Const(0, "int64"), Const(4, "int64"),
...            Store(B, (i,), Load(A, (i,))))
>>> k = Kernel("double", (A, B), (), body)
>>> k.args[1].name, body.kind
('B', 'serial')
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Optional

from tegrad.ir.expr import Const, Expr, Node

from tegrad.codegen.loops.errors import CHECK_KINDS
# the loop IR's limit on a loop marked "unrolled" (the schedule enforces it)
from tegrad.codegen.tuning import UNROLL_LIMIT  # noqa: F401

#: how a loop runs; "vectorized" and "unrolled" require a constant trip count
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")

#: what a buffer is to the compiled function
BUFFER_SCOPES = ("input", "output", "temp", "local")


@dataclass(frozen=True, eq=False, repr=False)
class Buffer(Node):
    """A dense C-ordered array: an argument (``input``/``output``), a temporary the
    compiled function owns across calls (``temp``), or a small array local to one
    invocation, such as a reduction's accumulator (``local``, may be shape ``()``).

    Buffers compare structurally, so two buffers with the same name and type are one.
    """

    name: str
    shape: tuple
    dtype: str
    scope: str = "temp"

    def __post_init__(self):
        if self.scope not in BUFFER_SCOPES:
            raise ValueError(f"buffer {self.name!r}: scope {self.scope!r} not in {BUFFER_SCOPES}")

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


def _check_rank(buffer, indices):
    """An element of ``buffer`` is named by one index per axis: a buffer seen with
    another shape (split axes) is indexed in its own shape, never in the other's."""
    if len(indices) != len(buffer.shape):
        raise ValueError(f"buffer {buffer.name!r} of shape {tuple(buffer.shape)} indexed "
                         f"with {len(indices)} indices")


#: ``TEXT["expr"](e)`` is the text of an expression with loads (set by :mod:`.printer`,
#: which the package imports: the nodes import nothing above them)
TEXT = {"expr": lambda e: object.__repr__(e)}


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """``buffer[indices]``: an expression; indices are int64 expressions."""

    buffer: Buffer
    indices: tuple
    dtype: str = ""

    def __post_init__(self):
        _check_rank(self.buffer, self.indices)
        if not self.dtype:
            object.__setattr__(self, "dtype", self.buffer.dtype)

    def __str__(self):
        # tegrad's expression printer does not know loads; the loop IR's installs itself
        return TEXT["expr"](self)


class Stmt(Node):
    """Base class of statements."""

    __slots__ = ()


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for var in range(begin, end, step): body`` (``step`` a positive int).

    ``kind`` is one of :data:`LOOP_KINDS`; it is a request to the backend, and a
    transformation that sets it must keep the loop's meaning (the iterations of a
    ``parallel`` loop are independent; a ``vectorized`` or ``unrolled`` one has a
    constant trip count).
    """

    var: Expr
    begin: Expr
    end: Expr
    body: Stmt
    kind: str = "serial"
    step: int = 1

    def __post_init__(self):
        if self.kind not in LOOP_KINDS:
            raise ValueError(f"loop {self.var}: kind {self.kind!r} not in {LOOP_KINDS}")
        if not (isinstance(self.step, int) and self.step >= 1):
            raise ValueError(f"loop {self.var}: step must be a positive int, got {self.step!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Block(Stmt):
    """Statements run in order."""

    stmts: tuple


@dataclass(frozen=True, eq=False, repr=False)
class If(Stmt):
    """A guarded block: ``if cond: then else: otherwise`` (``otherwise`` may be None).

    ``likely``: ``cond`` is expected to hold, and ``otherwise`` is a fallback for rare
    inputs (a product's exact loops when an operand is not finite); the backend may
    compile it only when it is first taken (see :mod:`codegen.runtime.executable`).
    """

    cond: Expr
    then: Stmt
    otherwise: Optional[Stmt] = None
    likely: bool = False


@dataclass(frozen=True, eq=False, repr=False)
class Store(Stmt):
    """``buffer[indices] = value``. ``stage``: the stage whose values it stores when not
    ``buffer``'s own (a temporary computed in another buffer's memory,
    :mod:`tegrad.codegen.lower.sum_in_place`)."""

    buffer: Buffer
    indices: tuple
    value: Expr
    stage: str = ""

    def __post_init__(self):
        _check_rank(self.buffer, self.indices)


@dataclass(frozen=True, eq=False, repr=False)
class Accumulate(Stmt):
    """``buffer[indices] = reducer.combine(buffer[indices], value)``.

    Kept distinct from a Store so that schedules know the update is a commutative,
    associative combination (``reducer`` is a :class:`tegrad.ir.reduction.Reducer`).
    ``stage``: as a :class:`Store`'s.
    """

    buffer: Buffer
    indices: tuple
    value: Expr
    reducer: object
    stage: str = ""

    def __post_init__(self):
        _check_rank(self.buffer, self.indices)


@dataclass(frozen=True, eq=False, repr=False)
class Let(Stmt):
    """``var = value`` (computed once), visible in ``body``; ``stage`` names the stage
    whose values ``var`` holds when it stands for that stage's buffer (a temporary read
    only where it is written, :mod:`tegrad.codegen.schedule.scalar_temps`)."""

    var: Expr
    value: Expr
    body: Stmt
    stage: str = ""


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """``buffer`` (scope ``local``) exists for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Check(Stmt):
    """If ``cond`` is false, the kernel stops and reports ``error`` about ``tensor``.

    ``error`` is one of :data:`ERROR_KINDS`; the runtime turns it into
    ``tg.OutOfBoundsError`` (or ``tg.TegradError`` for a division by zero) with
    :attr:`message`. Used for data-dependent indices and integer division by a run-time
    value: ``tensor`` is the tensor whose values were used as the index (or divisor),
    ``indexed`` the tensor they index, ``stage`` the stage the check sits in.

    >>> Check(Const(True, "bool"), "index_out_of_range", "labels", "logits", "loss").message
    "'labels': index out of range: a value read from it indexes 'logits' (in stage 'loss')"
    """

    cond: Expr
    error: str
    tensor: str
    indexed: str = ""
    stage: str = ""

    def __post_init__(self):
        if self.error not in CHECK_KINDS:
            raise ValueError(f"check on {self.tensor!r}: error kind {self.error!r} not in "
                             f"{CHECK_KINDS}")

    @property
    def message(self):
        """What a failed check reports, naming ``tensor`` first."""
        return check_message(self.error, self.tensor, self.indexed, self.stage)


def check_message(error, tensor, indexed="", stage=""):
    """The text of a failed check of kind ``error`` on values read from ``tensor`` (used
    to index ``indexed``, in ``stage``); see :class:`Check`."""
    read = stage != tensor  # else the values come from no other tensor
    where = f" (in stage {stage!r})" if stage and read else ""
    if error == "index_out_of_range" and indexed == tensor:
        return (f"{tensor!r}: index out of range: an index into it is outside its shape"
                f"{f' (in stage {stage!r})' if stage else ''}")
    if error == "index_out_of_range":
        target = repr(indexed) if indexed else "a tensor"
        return f"{tensor!r}: index out of range: a value read from it indexes {target}{where}"
    if error == "division_by_zero":
        what = ": a divisor read from it is zero" if read and stage else ""
        return f"{tensor!r}: integer division by zero{what}{where}"
    return f"{tensor!r}: run-time check {error!r} failed{where}"


@dataclass(frozen=True, eq=False, repr=False)
class MatrixProduct(Stmt):
    """``C[p, i, j] = sum_k A[p, i, k] * B[p, k, j]`` as ``spec`` (a
    :class:`tegrad.codegen.kernels.gemm.GemmSpec`) describes it: extents, element strides
    and offset tables, each operand starting at its element offset into its buffer (seen
    as a flat array). Overwrites every element of ``C`` the spec reaches; the backend runs
    it on the register-blocked gemm kernel with up to ``threads`` threads, whose results
    do not depend on the thread count.
    """

    spec: object
    c: Buffer
    a: Buffer
    b: Buffer
    c_offset: int = 0
    a_offset: int = 0
    b_offset: int = 0
    stage: str = ""  # as a Store's

    def __post_init__(self):
        (alo, ahi), (blo, bhi), (clo, chi) = self.spec.spans()
        for what, buf, off, lo, hi in (("A", self.a, self.a_offset, alo, ahi),
                                       ("B", self.b, self.b_offset, blo, bhi),
                                       ("C", self.c, self.c_offset, clo, chi)):
            if buf.dtype != self.spec.dtype or off + lo < 0 or off + hi >= buf.size:
                raise ValueError(f"matrix product: {what} ({buf!r} at element {off}) does "
                                 f"not hold the {self.spec.dtype} elements the spec reaches")

    @property
    def reads(self):
        """The buffers the product reads (anywhere in them, for dependences)."""
        return (self.a, self.b)


#: the run-time errors a :class:`Check` can report (see :mod:`.errors`)
ERROR_KINDS = CHECK_KINDS


@dataclass(frozen=True, eq=False, repr=False)
class Kernel(Node):
    """A compiled function: ``args`` (inputs then outputs, in call order), ``temps``
    (buffers it owns, allocated once and reused across calls) and ``body``."""

    name: str
    args: tuple
    temps: tuple
    body: Stmt
