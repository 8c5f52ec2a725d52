"""The condition under which one buffer may be written over another
(:func:`~tegrad.codegen.lower.in_place.overwriting_statement`, shared by the outputs
written into inputs and by the temporaries the storage plan merges).

On random three-statement kernels (``old`` written, ``new`` computed from it, both
read by an output statement): the condition holds exactly when every read of ``old`` in
the statement writing ``new`` is at the store's indices, before the store, and nothing
later reads or writes ``old``; where it holds, the kernel with ``new`` named ``old``
(one memory) computes what the kernel with the two apart does (loop interpreter).
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tegrad.ir.expr import Const, Var
from tegrad.codegen.loops.interpret import run as interpret
from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.lower.in_place import overwriting_statement, rename_buffer

I = Var("i", "int64")


def _c(v, dtype="int64"):
    return Const(v, dtype)


@st.composite
def kernels(draw):
    """``(kernel, new, old, holds)``: ``old[i] = x[i] + 1``; ``new[i]`` from ``old`` read
    at ``i + d`` for random shifts ``d`` (the loop kept inside the buffer); maybe
    ``side[i]`` reading ``old[i]`` after ``new``'s store, in the same loop body; maybe
    ``old`` written again after the store; the output reading ``new`` (and ``old``, when
    a later reader is drawn). ``holds``: what the condition should say."""
    n = draw(st.integers(3, 20))
    x = Buffer("x", (n,), "float64", "input")
    out = Buffer("out", (n,), "float64", "output")
    old, new, side = (Buffer(b, (n,), "float64") for b in ("old", "new", "side"))
    shifts = draw(st.lists(st.integers(-1, 1), min_size=1, max_size=3))
    after = draw(st.booleans())
    rewrite = draw(st.booleans())
    later = draw(st.booleans())
    value = _c(0.5, "float64")
    for d in shifts:
        value = value * Load(old, (I + d,)) + float(d + 2)
    stores = [Store(new, (I,), value)]
    if after:
        stores.append(Store(side, (I,), Load(old, (I,)) * 3.0))
    if rewrite:
        stores.append(Store(old, (I,), Load(new, (I,)) - 1.0))
    total = Load(new, (I,)) + (Load(side, (I,)) if after else 0.0) \
        + (Load(old, (I,)) if later else 0.0)
    stmts = (For(I, _c(0), _c(n), Store(old, (I,), Load(x, (I,)) + 1.0)),
             For(I, _c(1), _c(n - 1), Block(tuple(stores)) if len(stores) > 1 else stores[0]),
             For(I, _c(1), _c(n - 1), Store(out, (I,), total)))
    holds = set(shifts) == {0} and not after and not rewrite and not later
    temps = (old, new) + ((side,) if after else ())
    return Kernel("k", (x, out), temps, Block(stmts)), new, old, holds


@settings(max_examples=150, deadline=None)
@given(kernels(), st.integers(0, 2**31 - 1))
def test_the_condition_holds_exactly_for_elementwise_reads_and_keeps_the_results(case, seed):
    kernel, new, old, holds = case
    t = overwriting_statement(list(kernel.body.stmts), new, old)
    assert t == (1 if holds else None)
    if holds:
        x = np.random.default_rng(seed).uniform(-1, 1, kernel.args[0].shape)
        merged = Kernel(kernel.name, kernel.args, tuple(b for b in kernel.temps if b != new),
                        rename_buffer(kernel.body, new, old))
        np.testing.assert_array_equal(interpret(merged, [x])[0][0], interpret(kernel, [x])[0][0])


def test_buffers_of_another_shape_or_dtype_are_not_written_over():
    n = 8
    old = Buffer("old", (n,), "float64")
    for new, t in ((Buffer("new", (n,), "float64"), 0), (Buffer("new", (n,), "float32"), None),
                   (Buffer("new", (n, 1), "float64"), None)):
        index = (I,) if len(new.shape) == 1 else (I, _c(0))
        stmt = For(I, _c(0), _c(n), Store(new, index, Load(old, (I,))))
        assert overwriting_statement([stmt], new, old) == t
