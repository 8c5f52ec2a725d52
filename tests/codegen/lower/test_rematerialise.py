"""Cheap copies written again before their late readers (codegen/lower/rematerialise.py).

On random kernel bodies (shifted, zero-padded copies, some fused behind the statement
computing their source, which may have been written before too, arithmetic, sources
overwritten later, temporaries written twice): the kernel with its copies rematerialised
computes the same outputs as the original (the loop-IR interpreter, bit for bit), its
peak of live temporaries (a temporary written in place over another counted once) is
lower when it changed, and every new statement is a copy of the original's stores. On compiled programs (two
padded convolutions with a relu between, 1-d or 2-d, differentiated with respect to the
input and both weights): values equal to ``tg.evaluate`` on 1 and 2 threads. In such a
program's step, the padded copies are not alive at the statement where the live bytes
peak, as they are with the pass turned off.
"""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.ir.expr import Const, Var, logical_and, select
from tegrad.codegen import pipeline
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import (buffers_of, loads, stmt_exprs, substitute_expr,
                                         walk_stmts)
from tegrad.codegen.lower.in_place import written_buffers
from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.loops.printer import format_expr
from tegrad.codegen.llvm.kernel_buffers import buffer_bytes, live_ranges
from tegrad.codegen.lower.memory_order import peak_bytes
from tegrad.codegen.lower.rematerialise import planned_peak, rematerialise

from support.compare import built_twice_equals_evaluator, same_in_interpreter

I = Var("i", "int64")
N = 6


def _loop(body):
    return For(I, Const(0, "int64"), Const(N, "int64"), body)


def _padded(src, shift, fill):
    """``src`` shifted by ``shift`` elements, ``fill`` where that falls outside it."""
    at = I - Const(shift, "int64") if shift else I  # unshifted: the element just stored
    inside = logical_and(at >= 0, at < N)
    return select(inside, Load(src, (at,)), Const(fill, "float64"))


@st.composite
def kernels(draw):
    """A kernel of 4-16 statements over 2 inputs, 1-2 outputs and 2-10 temporaries of 6
    float64 elements; each statement a loop writing a non-input buffer: a shifted,
    zero-padded copy of a written buffer, the same fused behind the statement computing
    its source (the copy reading the element just computed), or arithmetic on up to three
    written buffers (reversed or not; mostly the last two written). Temporaries may be
    written more than once (mostly not), and a copy's source overwritten after it. The
    outputs, written last, read some temporaries."""
    inputs = [Buffer(f"x{k}", (N,), "float64", "input") for k in range(2)]
    outputs = [Buffer(f"y{k}", (N,), "float64", "output")
               for k in range(draw(st.integers(1, 2)))]
    temps = [Buffer(f"t{k}", (N,), "float64") for k in range(draw(st.integers(2, 10)))]
    written, stmts = list(inputs), []

    def arithmetic():
        value = Const(float(draw(st.integers(1, 3))), "float64")
        # mostly recent buffers, so that most temporaries live briefly and a far read
        # keeps one alive across the others
        near = st.sampled_from(written[-2:])
        for b in draw(st.lists(st.one_of(near, near, st.sampled_from(written)), max_size=3)):
            index = I if draw(st.booleans()) else Const(N - 1, "int64") - I
            value = value * 0.5 + Load(b, (index,))
        return value

    for _ in range(draw(st.integers(4, 16))):
        fresh = [t for t in temps if t not in written]
        target = draw(st.sampled_from(fresh if fresh and draw(st.booleans()) else
                                      outputs + temps))
        kind = draw(st.sampled_from(["copy", "fused", "arithmetic"]))
        fill = float(draw(st.integers(0, 1)))
        if kind == "copy":
            src = draw(st.sampled_from([b for b in written if b != target]))
            body = Store(target, (I,), _padded(src, draw(st.integers(-2, 2)), fill))
        elif kind == "fused":
            src = draw(st.sampled_from([b for b in outputs + temps if b != target]))
            body = Block((Store(src, (I,), arithmetic()),
                          Store(target, (I,), _padded(src, 0, fill))))
            written.append(src)
        else:
            body = Store(target, (I,), arithmetic())
        stmts.append(_loop(body))
        written.append(target)
    for y in outputs:  # every output written, last, from some temporaries
        value = Load(y, (I,))
        for t in draw(st.lists(st.sampled_from(temps), min_size=1, max_size=3)):
            value = value + Load(t, (I,))
        stmts.append(_loop(Store(y, (I,), value)))
    return Kernel("k", tuple(inputs + outputs), tuple(temps), Block(tuple(stmts)))




def _without_again(e):
    """The text of ``e``, a copy's buffers named as the originals."""
    return re.sub(r"_again(_\d+)?", "", format_expr(e))


def _stores(stmt):
    return [(s.indices, s.value) for s in walk_stmts(stmt) if type(s) is Store]


@settings(max_examples=150, deadline=None)
@given(kernels(), st.integers(0, 2 ** 31))
def test_rematerialised_kernel_computes_the_same_in_a_lower_peak(kernel, seed):
    again = same_in_interpreter(kernel, rematerialise, seed)
    if again is kernel:
        return
    assert planned_peak(again) < planned_peak(kernel)
    new = [t for t in again.temps if t not in kernel.temps]
    assert new and all("_again" in t.name for t in new)
    old = list(kernel.body.stmts)
    for stmt in again.body.stmts:
        if stmt in old:
            continue
        written = {s.buffer for s in walk_stmts(stmt) if type(s) is Store}
        if written <= set(new):  # a copy: a single loop storing what an original stored
            assert len(written) == 1 and len(_stores(stmt)) == 1
            (indices, value), = _stores(stmt)
            # a copy reads what the original read, or a copy of that
            back = _without_again(substitute_expr(value, {stmt.var.name: I}))
            assert back in {format_expr(v) for s in old for _, v in _stores(s)}


def _two_convs(dims, batch, channels, size, kernel, padding, dtype):
    """``sum(conv(relu(conv(x, w1)), w2) * head)`` with zero padding ``padding``
    (``dims``-d convolutions), and its gradients with respect to x, w1 and w2."""
    conv = nn.conv1d if dims == 1 else nn.conv2d
    x = tg.placeholder((batch, channels) + (size,) * dims, dtype=dtype, name="x")
    w1, w2 = (tg.placeholder((channels, channels) + (kernel,) * dims, dtype=dtype, name=n)
              for n in ("w1", "w2"))
    h = conv(nn.relu(conv(x, w1, padding=padding)), w2, padding=padding)
    head = tg.placeholder(h.shape, dtype=dtype, name="head")
    loss = (h * head).sum()
    return [x, w1, w2, head], [loss, *tg.differentiate(loss, [x, w1, w2])]


@pytest.mark.parametrize("threads", [1, 2])
@given(dims=st.sampled_from([1, 2]), batch=st.integers(1, 3), channels=st.integers(2, 6),
       size=st.integers(5, 12), kernel=st.integers(2, 3), padding=st.integers(1, 2),
       dtype=st.sampled_from(["float32", "float64"]))
@settings(max_examples=5, deadline=None)
def test_compiled_gradients_of_padded_convolutions_equal_the_evaluator(
        threads, dims, batch, channels, size, kernel, padding, dtype):
    inputs, outputs = _two_convs(dims, batch, channels, size, kernel, padding, dtype)
    built_twice_equals_evaluator(inputs, outputs, size * 100 + channels * 10 + kernel, dtype,
                                 threads)


def _alive_at_peak(kernel):
    """The temporaries alive at the first top-level statement where the bytes of live
    temporaries peak."""
    ranges = live_ranges(kernel.body, list(kernel.temps))
    live = [sum(buffer_bytes(b) for b, (lo, hi) in ranges.items() if lo <= k <= hi)
            for k in range(len(kernel.body.stmts))]
    at = live.index(max(live))
    return {b.name for b, (lo, hi) in ranges.items() if lo <= at <= hi}, max(live)


def test_padded_copies_are_not_alive_at_the_peak(monkeypatch):
    """A ResNet-like step (two padded 3x3 convolutions with a relu between, batch 4, 16
    channels of 12x12, every gradient): the padded input and relu are read by the
    forward products and again by the weight gradients at the end, and only the pass
    keeps them from living across the backward pass."""
    inputs, outputs = _two_convs(2, 4, 16, 12, 3, 1, "float32")
    with_pass = pipeline.compile_kernel(inputs, outputs, threads=1).kernel
    monkeypatch.setattr(pipeline, "PASSES", tuple(
        p for p in pipeline.PASSES if p[0] != "rematerialise"))
    without = pipeline.compile_kernel(inputs, outputs, threads=1).kernel
    alive_without, peak_without = _alive_at_peak(without)
    alive_with, peak_with = _alive_at_peak(with_pass)
    padded = {"x_padded", "relu_padded"}
    assert padded <= {t.name for t in without.temps}
    assert padded & alive_without
    assert not padded & alive_with
    assert peak_with < peak_without
    new = {t.name for t in with_pass.temps} - {t.name for t in without.temps}
    assert {f"{p}_again" for p in padded & alive_without} <= new <= \
        {f"{p}_again" for p in padded}


def test_every_statement_kind_has_a_rule_for_cutting_out_a_copy():
    """A statement kind the pass had no rule for would make no temporary a cheap copy
    (rather than copy it wrongly); every kind of the loop IR has one."""
    from tegrad.codegen.loops import nodes
    from tegrad.codegen.lower.rematerialise import _Copy
    kinds = [c for c in vars(nodes).values()
             if isinstance(c, type) and issubclass(c, nodes.Stmt) and c is not nodes.Stmt]
    assert len(kinds) >= 9
    assert [k.__name__ for k in kinds if not hasattr(_Copy, f"_{k.__name__.lower()}")] == []


@given(n=st.integers(8, 64), update=st.booleans())
@settings(max_examples=20, deadline=None)
def test_no_copy_reads_an_input_after_its_update(n, update):
    """A padded copy of ``x`` read at the start and the end, with a large temporary
    between: copied again before its last reader, unless a statement between computes
    the next value of ``x`` (an output of its shape, from ``x``), which then could no
    longer be written in place over it."""
    x = Buffer("x", (n,), "float64", "input")
    new_x = Buffer("new_x", (n,), "float64", "output")
    out = Buffer("out", (n,), "float64", "output")
    p, a, b = (Buffer(name, (n,), "float64") for name in ("p", "a", "b"))
    loop = lambda dst, value: For(I, Const(0, "int64"), Const(n, "int64"),  # noqa: E731
                                  Store(dst, (I,), value))
    step = Load(a, (I,)) * 0.5
    body = Block((loop(p, _padded_by(x, n)), loop(a, Load(p, (I,)) * 2.0),
                  loop(new_x, Load(x, (I,)) - step if update else step),
                  # (reversed: not written in place over a)
                  loop(b, Load(a, (Const(n - 1, "int64") - I,)) + 1.0),
                  loop(out, Load(b, (I,)) + Load(p, (I,)))))
    kernel = Kernel("k", (x, new_x, out), (p, a, b), body)
    again = rematerialise(kernel)
    assert (again is kernel) == update
    values = [np.random.default_rng(n).uniform(-1, 1, n)]
    for got, want in zip(run(again, values)[0], run(kernel, values)[0]):
        np.testing.assert_array_equal(got, want)


def _padded_by(src, n):
    at = I - Const(1, "int64")
    return select(logical_and(at >= 0, at < n), Load(src, (at,)), Const(0.0, "float64"))


def _mlp(rows, width, hidden, dtype):
    """``sum(dense(layer_norm(dense(gelu(dense(x, w1, b1)), w2, b2) + x), w3) * head)``
    and its gradients with respect to x and every weight: the GELU's output and the layer
    norm's output are read by the forward pass and again by the backward pass."""
    x = tg.placeholder((rows, width), dtype=dtype, name="x")
    w1 = tg.placeholder((hidden, width), dtype=dtype, name="w1")
    b1 = tg.placeholder((hidden,), dtype=dtype, name="b1")
    w2 = tg.placeholder((width, hidden), dtype=dtype, name="w2")
    b2 = tg.placeholder((width,), dtype=dtype, name="b2")
    w3 = tg.placeholder((width, width), dtype=dtype, name="w3")
    h = nn.dense(nn.gelu(nn.dense(x, w1, b1)), w2, b2)
    y = nn.dense(nn.layer_norm(h + x), w3)
    head = tg.placeholder(y.shape, dtype=dtype, name="head")
    loss = (y * head).sum()
    inputs = [x, w1, b1, w2, b2, w3, head]
    return inputs, [loss, *tg.differentiate(loss, inputs[:6])]


@pytest.mark.parametrize("threads", [1, 2])
@given(rows=st.integers(24, 80), width=st.integers(8, 40), hidden=st.integers(48, 160),
       dtype=st.sampled_from(["float32", "float64"]))
@settings(max_examples=4, deadline=None)
def test_an_activation_is_computed_again_for_its_backward_reader(
        threads, rows, width, hidden, dtype):
    """The GELU's output (an elementwise function of the dense output, which the GELU's
    derivative keeps alive anyway) is computed again right before the weight gradient
    that reads it, where that lowers the step's peak, the values equal to
    ``tg.evaluate``'s; and the planned peak is below the kernel's without the pass."""
    inputs, outputs = _mlp(rows, width, hidden, dtype)
    built_twice_equals_evaluator(inputs, outputs, rows * 100 + hidden, dtype, threads)
    with_pass = pipeline.compile_kernel(inputs, outputs, threads=threads).kernel
    names = {t.name for t in with_pass.temps}
    assert any(n.startswith("gelu") and "_again" in n for n in names), sorted(names)
    passes = pipeline.PASSES
    try:
        pipeline.PASSES = tuple(p for p in passes if p[0] != "rematerialise")
        without = pipeline.compile_kernel(inputs, outputs, threads=threads).kernel
    finally:
        pipeline.PASSES = passes
    assert planned_peak(with_pass) < planned_peak(without)


@given(n=st.integers(4, 40), shift=st.integers(-1, 1), late_first=st.booleans(),
       between=st.integers(1, 3), seed=st.integers(0, 2 ** 31))
@settings(max_examples=40, deadline=None)
def test_a_copy_reads_the_copy_of_its_source(n, shift, late_first, between, seed):
    """``a`` computed from an input and ``b`` from ``a`` (as an embedding and its layer
    norm), both read again at the end after large temporaries: ``b``'s copy reads
    ``a``'s copy (moved up to run right before it, or already there), so that neither
    ``a`` nor ``b`` lives across the large temporaries; the outputs equal the
    original's."""
    x = Buffer("x", (n,), "float64", "input")
    out = Buffer("out", (n,), "float64", "output")
    a, b = Buffer("a", (n,), "float64"), Buffer("b", (n,), "float64")
    big = [Buffer(f"big{k}", (8 * n,), "float64") for k in range(between)]
    loop = lambda dst, value, size=n: For(I, Const(0, "int64"), Const(size, "int64"),  # noqa: E731
                                          Store(dst, (I,), value))
    at = I - Const(shift, "int64") if shift else I
    padded = select(logical_and(at >= 0, at < n), Load(a, (at,)), Const(0.0, "float64"))
    stmts = [loop(a, Load(x, (I,)) * 3.0 + 1.0), loop(b, padded * 0.5),
             loop(out, Load(b, (I,)) + Load(a, (I,)))]
    for k, t in enumerate(big):  # large temporaries alive one after another
        source = Load(out, (I % n,)) if k == 0 else Load(big[k - 1], (I,))
        stmts.append(loop(t, source * 2.0, 8 * n))
    stmts.append(loop(out, Load(out, (I,)) + Load(big[-1], (I * 8,))))
    for t in ([b, a] if late_first else [a, b]):  # the late readers
        stmts.append(loop(out, Load(out, (I,)) * Load(t, (I,))))
    kernel = Kernel("k", (x, out), tuple([a, b] + big), Block(tuple(stmts)))
    again = same_in_interpreter(kernel, rematerialise, seed)
    names = {t.name for t in again.temps}
    assert {"a_again", "b_again"} <= names
    assert planned_peak(again) < planned_peak(kernel)
    # b's copy reads a's copy, not a, which dies before the large temporaries
    copy_b = [s for s in again.body.stmts if "b_again" in {w.name for w in written_buffers(s)}]
    assert len(copy_b) == 1
    read = {ld.buffer.name for node in walk_stmts(copy_b[0]) for e in stmt_exprs(node)
            for ld in loads(e)}
    assert read == {"a_again"}


@pytest.mark.parametrize("threads", [1, 2])
@given(batch=st.integers(2, 6), seq=st.integers(8, 24), width=st.integers(16, 48),
       hidden=st.integers(64, 160), vocab=st.integers(5, 40))
@settings(max_examples=2, deadline=None)
def test_an_embedding_gathered_again_equals_the_evaluator(threads, batch, seq, width,
                                                          hidden, vocab):
    """An embedding (a gather by token ids, plus positions) read by a layer norm, whose
    output feeds a wide MLP, and both read again by the backward pass after the MLP's:
    the compiled step gathers the embedding again (a copy loading the ids) and equals
    ``tg.evaluate``."""
    ids = tg.placeholder((batch, seq), dtype="int32", name="ids")
    table = tg.placeholder((vocab, width), name="table")
    pos = tg.placeholder((seq, width), name="pos")
    w1 = tg.placeholder((hidden, width), name="w1")
    w2 = tg.placeholder((width, hidden), name="w2")
    g = tg.placeholder((width,), name="g")
    h = nn.embedding(table, ids) + pos
    y = nn.dense(nn.gelu(nn.dense(nn.layer_norm(h, g), w1)), w2)
    head = tg.placeholder(y.shape, name="head")
    loss = (y * head).sum()
    params = [table, pos, w1, w2, g]
    outputs = [loss, *tg.differentiate(loss, params)]
    inputs = [ids, *params, head]
    rng = np.random.default_rng(batch * 1000 + seq)
    arrays = [rng.integers(0, vocab, ids.shape).astype("int32")] + \
        [rng.uniform(-1, 1, t.shape).astype("float32") for t in inputs[1:]]
    f = tg.build(inputs, outputs, threads=threads)
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    for _ in range(2):
        for got, ref in zip(f(*arrays), want):
            np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)
    kernel = pipeline.compile_kernel(inputs, outputs, threads=threads).kernel
    copies = [s for s in kernel.body.stmts
              if any("_again" in b.name for b in written_buffers(s))]
    assert any("ids" in {ld.buffer.name for node in walk_stmts(s) for e in stmt_exprs(node)
                         for ld in loads(e)} for s in copies)
