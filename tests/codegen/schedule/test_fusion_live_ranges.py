"""Fusion keeps a temporary's live range where the program uses it (codegen/schedule/fusion.py).

Loops touching no common buffer (the bias and gain gradients of different layers, column
sums of different tensors) stay apart at the top level: fused, they run at the end of the
backward pass as one loop over rows, holding every tensor they read until then, strided.

An accumulator's zero fill is not fused with an unrelated earlier loop of the same range
(a recurrent network's forward bias add), which would hold the accumulator through the
whole forward pass; it moves up only just before the loop its first accumulation fuses
with. On random kernels: the fused kernel computes the same outputs bit for bit (the
loop-IR interpreter), and a loop that is the first to use a large temporary and reads
nothing from the loop it joins passes no statement that stays between them. On random
recurrent programs: compiled values equal ``tg.evaluate`` on 1 and 2 threads.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.expr import Const, Var
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import loads, stmt_exprs, walk_stmts
from tegrad.codegen.loops.nodes import Accumulate, Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.lower.memory_order import buffer_bytes
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.fusion import (fuse_list, fuse_stages, fusion_parts, stage_names,
                                            statements)
from tegrad.codegen.tuning import SHARED_MIN_BYTES


def rnn(steps, batch, hidden, dtype, cell):
    """``(inputs, [dx, da, dw])`` of a recurrent net over a stacked projection
    ``g[t] = x[t] * a`` (a temporary, read one step at a time): ``h_t = cell(g[t] +
    h_{t-1} * w)``. Its gradient ``dg`` accumulates one slice per step, backward."""
    x = tg.placeholder((steps, batch, hidden), dtype=dtype, name="x")
    a = tg.placeholder((hidden,), dtype=dtype, name="a")
    w = tg.placeholder((hidden,), dtype=dtype, name="w")
    head = tg.placeholder((batch, hidden), dtype=dtype, name="head")
    act = {"tanh": tg.tanh, "sigmoid": tg.sigmoid, "square": lambda v: v * v * 0.5}[cell]
    g = tg.compute((steps, batch, hidden), lambda t, b, j: x[t, b, j] * a[j], name="g")
    h = tg.compute((batch, hidden), lambda b, j: act(g[0, b, j]), name="h0")
    for t in range(1, steps):
        h = tg.compute((batch, hidden), lambda b, j, h=h, t=t: act(g[t, b, j] + h[b, j] * w[j]),
                       name=f"h{t}")
    loss = tg.ops.sum(tg.compute((batch, hidden), lambda b, j: h[b, j] * head[b, j],
                                 name="weighted"))
    return [x, a, w, head], list(tg.differentiate(loss, [x, a, w]))


@st.composite
def rnn_shapes(draw):
    """Shapes whose stacked gradient ``dg`` is large enough to share storage (so its
    live range counts)."""
    steps, batch = draw(st.integers(2, 5)), draw(st.integers(2, 6))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    least = -(-SHARED_MIN_BYTES // (steps * batch * np.dtype(dtype).itemsize))
    return {"steps": steps, "batch": batch, "hidden": draw(st.integers(least, least + 8)),
            "dtype": dtype, "cell": draw(st.sampled_from(["tanh", "sigmoid", "square"]))}


def _writes(stmt):
    return set(stage_names(stmt))


def _first_writer(stmts, name):
    return next(k for k, s in enumerate(stmts) if name in _writes(s))


def _first_accumulation(stmts, name):
    return next(k for k, s in enumerate(stmts) if any(
        type(n) is Accumulate and n.buffer.name == name for n in walk_stmts(s)))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=rnn_shapes())
def test_the_zero_fill_of_a_stacked_gradient_is_not_fused_with_the_forward_pass(shapes):
    inputs, outputs = rnn(**shapes)
    kernel = lower_program(inputs, outputs)
    parts = fusion_parts(kernel)
    assert buffer_bytes(next(b for b in kernel.temps if b.name == "dg")) >= SHARED_MIN_BYTES
    # without the live-range rule (no temporaries given), the zero fill of dg joins the
    # loop computing g, the first loop of its range
    unruled, _ = fuse_list(parts)
    assert "g" in _writes(unruled[_first_writer(unruled, "dg")])
    for stmts in (statements(fuse_stages(kernel)[0].body),
                  statements(tg.build(inputs, outputs, threads=1).kernel.body)):
        first = _first_writer(stmts, "dg")
        assert "g" not in _writes(stmts[first])
        # the fill is in (or right before) the loop that accumulates dg first
        assert _first_accumulation(stmts, "dg") <= first + 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=rnn_shapes(), threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_compiled_recurrent_gradients_equal_the_evaluator(shapes, threads, seed):
    inputs, outputs = rnn(**shapes)
    rng = np.random.default_rng(seed)
    feed = [rng.standard_normal(p.shape).astype(p.dtype) * 0.5 for p in inputs]
    f = tg.build(inputs, outputs, threads=threads)
    want = tg.evaluate(outputs, dict(zip(inputs, feed)))
    tol = 1e-5 if shapes["dtype"] == "float32" else 1e-12
    for g, w in zip(f(*feed), want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
    # the fused loops compute the lowered program's bits (fusion reorders nothing a
    # value depends on)
    kernel = lower_program(inputs, outputs)
    got, _ = run(fuse_stages(kernel)[0], feed)
    plain, _ = run(kernel, feed)
    for g, p in zip(got, plain):
        assert g.tobytes() == p.tobytes()


N = 512  # float64: 4096 bytes, a temporary that shares storage
I = Var("i", "int64")


def _loop(n, body):
    return For(I, Const(0, "int64"), Const(n, "int64"), body)


@st.composite
def kernels(draw):
    """A kernel of loops over 2 inputs, 1-2 outputs and 1-4 temporaries of :data:`N`
    float64: zero fills, stores and accumulations of loads of written buffers at the
    loop's index or reversed (so some loops may not fuse), some over half the range (so
    some statements stay between two that fuse); every output written last."""
    inputs = [Buffer(f"x{k}", (N,), "float64", "input") for k in range(2)]
    outputs = [Buffer(f"y{k}", (N,), "float64", "output")
               for k in range(draw(st.integers(1, 2)))]
    temps = [Buffer(f"t{k}", (N,), "float64") for k in range(draw(st.integers(1, 4)))]
    written, filled, stmts = list(inputs), set(), []
    for _ in range(draw(st.integers(3, 12))):
        target = draw(st.sampled_from(outputs + temps))
        n = draw(st.sampled_from([N, N, N // 2]))
        kind = draw(st.sampled_from(["fill", "store", "accumulate"]))
        if kind == "fill":
            stmts.append(_loop(n, Store(target, (I,), Const(0.0, "float64"))))
            filled.add(target)
            written.append(target)
            continue
        value = Const(float(draw(st.integers(1, 3))), "float64")
        for b in draw(st.lists(st.sampled_from(written), max_size=3)):
            index = I if draw(st.booleans()) else Const(n - 1, "int64") - I
            value = value * 0.5 + Load(b, (index,))
        if kind == "accumulate" and target in filled:
            stmts.append(_loop(n, Accumulate(target, (I,), value, tg.sum)))
        else:
            stmts.append(_loop(n, Store(target, (I,), value)))
            filled.add(target)
        written.append(target)
    for y in outputs:
        stmts.append(_loop(N, Store(y, (I,), Const(1.0, "float64") + Load(temps[0], (I,)))))
    return Kernel("k", tuple(inputs + outputs), tuple(temps), Block(tuple(stmts)))


def _written(stmt):
    return {n.buffer for n in walk_stmts(stmt) if type(n) in (Store, Accumulate)}


def _reads(stmt):
    return {ld.buffer for n in walk_stmts(stmt) for e in stmt_exprs(n) for ld in loads(e)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernels(), st.integers(0, 2 ** 31))
def test_random_kernels_fuse_to_the_same_bits_holding_no_temporary_longer(kernel, seed):
    rng = np.random.default_rng(seed)
    feed = [rng.uniform(-1, 1, b.shape) for b in kernel.args if b.scope == "input"]
    parts = fusion_parts(kernel)
    out, groups = fuse_list(parts, temps=frozenset(kernel.temps), top_level=True)
    assert sorted(k for g in groups for k in g) == list(range(len(parts)))
    fused = Kernel(kernel.name, kernel.args, kernel.temps, Block(tuple(out)))
    want, _ = run(kernel, feed)
    got, _ = run(fused, feed)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()
    # a loop that first touches a temporary and reads nothing its group computed before
    # it joins only past statements emitted before its group (fused or moved up)
    first = {}
    for k, s in enumerate(parts):
        for b in (_written(s) | _reads(s)) & set(kernel.temps):
            first.setdefault(b, k)
    emitted = {k: pos for pos, g in enumerate(groups) for k in g}
    for pos, g in enumerate(groups):
        for n, j in enumerate(g[1:], 1):
            # a statement reading something joins only a group touching a buffer it
            # touches (reuse)
            before = set().union(*(_written(parts[m]) | _reads(parts[m]) for m in g[:n]))
            assert not _reads(parts[j]) or (_written(parts[j]) | _reads(parts[j])) & before, \
                (g, j)
            starts = {b for b, k in first.items() if k == j}
            written = set().union(*(_written(parts[m]) for m in g[:n]))
            if not starts or _reads(parts[j]) & written:
                continue
            for k in range(g[0] + 1, j):
                assert emitted[k] <= pos, (g, j, k)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), t=st.integers(12, 20), heads=st.integers(2, 4),
       per_head=st.integers(12, 16), causal=st.booleans(), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**16))
def test_bias_gradients_of_attention_projections_are_separate_statements(
        n, t, heads, per_head, causal, threads, seed):
    """The bias gradients of an attention's projections are column sums over different
    tensors (at these sizes the projections' gradients are products, which no loop
    joins): each is a top-level statement of its own (fused, they ran last, one loop
    over columns, strided), and the compiled gradients equal the evaluator's."""
    e = heads * per_head
    x = tg.placeholder((n, t, e), dtype="float64", name="x")
    ws = [tg.placeholder((e, e), dtype="float64", name=f"w_{c}") for c in "qkvo"]
    bs = [tg.placeholder((e,), dtype="float64", name=f"b_{c}") for c in "qkvo"]
    head = tg.placeholder((n, t, e), dtype="float64", name="head")
    out = tg.nn.multi_head_attention(x, x, x, *ws, num_heads=heads, b_q=bs[0], b_k=bs[1],
                                     b_v=bs[2], b_o=bs[3], causal=causal)
    grads = list(tg.differentiate(tg.ops.sum(out * head), [x, *bs]))
    inputs = [x, head, *ws, *bs]
    f = tg.build(inputs, grads, threads=threads)
    names = {f"d{b.name}" for b in bs}
    for s in statements(f.kernel.body):
        assert len(set(stage_names(s)) & names) <= 1, stage_names(s)
    rng = np.random.default_rng(seed)
    feed = [rng.standard_normal(p.shape) * 0.5 for p in inputs]
    want = tg.evaluate(grads, dict(zip(inputs, feed)))
    for g, w in zip(f(*feed), want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(w).max()))
