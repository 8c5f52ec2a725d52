"""A scatter into constant slices (the adjoint of a stacked input read one step at a time)
runs as one scatter per slice, each placed where its values are ready and fused with the
loops that compute them; the split changes no bit of the result."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Accumulate, MatrixProduct, Store
from tegrad.codegen.lower.program import lower_program, prepare
from tegrad.codegen.lower.stacked_scatter import place_links_early, split_stacked_scatters
from tegrad.codegen.schedule.fusion import statements
from tegrad.ir.expr import Const
from tegrad.ir.graph import topological_order
from tegrad.ir.tensor import ScatterOp


def rnn(steps, batch, hidden, dtype, cell, product):
    """``(inputs, [dx, dW])`` of a recurrent net over a stacked input ``x[t]``: each step
    ``h_t = cell(x[t] + h_{t-1} W)`` (``product``) or ``cell(x[t] + h_{t-1} * w)``."""
    x = tg.placeholder((steps, batch, hidden), dtype=dtype, name="x")
    w = tg.placeholder((hidden, hidden) if product else (hidden,), dtype=dtype, name="w")
    head = tg.placeholder((batch, hidden), dtype=dtype, name="head")
    act = {"tanh": tg.tanh, "sigmoid": tg.sigmoid, "square": lambda v: v * v * 0.5}[cell]
    h = tg.compute((batch, hidden), lambda b, j: act(x[0, b, j]), name="h0")
    for t in range(1, steps):
        if product:
            k = tg.reduce_axis((0, hidden), name="k")
            p = tg.compute((batch, hidden), lambda b, j, h=h, k=k: tg.sum(h[b, k] * w[k, j], axis=k),
                           name=f"p{t}")
        else:
            p = tg.compute((batch, hidden), lambda b, j, h=h: h[b, j] * w[j], name=f"p{t}")
        h = tg.compute((batch, hidden), lambda b, j, p=p, t=t: act(x[t, b, j] + p[b, j]),
                       name=f"h{t}")
    loss = tg.ops.sum(tg.compute((batch, hidden), lambda b, j: h[b, j] * head[b, j],
                                 name="weighted"))
    dx, dw = tg.differentiate(loss, [x, w])
    return [x, w, head], [dx, dw]


programs = st.fixed_dictionaries({
    "steps": st.integers(2, 6), "batch": st.integers(1, 5), "hidden": st.integers(1, 12),
    "dtype": st.sampled_from(["float32", "float64"]),
    "cell": st.sampled_from(["tanh", "sigmoid", "square"]), "product": st.booleans()})


def _feed(inputs, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape).astype(p.dtype) * 0.5 for p in inputs]


def _stacked(outputs):
    return [t for t in topological_order(prepare(outputs, True)) if type(t.op) is ScatterOp
            and len(t.op.targets) > 1 and t.name == outputs[0].name]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, seed=st.integers(0, 2**16))
def test_split_lowering_gives_the_same_bits_as_the_whole_scatter(program, seed):
    inputs, outputs = rnn(**program)
    feed = _feed(inputs, seed)
    split = lower_program(inputs, outputs, contractions=True)
    whole = lower_program(inputs, outputs, contractions=True, plain=[outputs[0].name])
    got, _ = run(split, feed)
    want, _ = run(whole, feed)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_compiled_split_scatter_equals_the_evaluator(program, threads, seed):
    inputs, outputs = rnn(**program)
    feed = _feed(inputs, seed)
    f = tg.build(inputs, outputs, threads=threads)
    want = tg.evaluate(outputs, dict(zip(inputs, feed)))
    tol = 1e-5 if program["dtype"] == "float32" else 1e-12
    for g, w in zip(f(*feed), want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))


def _slice_of(stmt, buffer):
    """The constants at which ``stmt`` accumulates into ``buffer``'s first index."""
    return {n.indices[0].value for n in walk_stmts(stmt)
            if type(n) is Accumulate and n.buffer.name == buffer and type(n.indices[0]) is Const}


def _writes(stmt):
    return {n.buffer.name for n in walk_stmts(stmt) if type(n) in (Store, Accumulate)} | \
        {n.c.name for n in walk_stmts(stmt) if type(n) is MatrixProduct}


@given(steps=st.integers(3, 7), cell=st.sampled_from(["tanh", "sigmoid"]))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_each_slice_runs_in_the_loops_of_its_step(steps, cell):
    inputs, outputs = rnn(steps, 4, 16, "float32", cell, product=True)
    assert _stacked(outputs), "the adjoint of x is one scatter into a slice per step"
    f = tg.build(inputs, outputs)
    dx = outputs[0].name
    slices = {}
    for s in statements(f.kernel.body):
        for c in _slice_of(s, dx):
            assert c not in slices, "each slice is written by one statement"
            slices[c] = s
    assert sorted(slices) == list(range(steps))
    assert len({id(s) for s in slices.values()}) == steps, "one statement per slice"
    for t in range(1, steps):
        # fused with the loops computing the step's adjoint, which its values read
        assert f"dp{t}" in _writes(slices[t]), (t, sorted(_writes(slices[t])))


def test_links_follow_the_last_stage_they_read():
    inputs, outputs = rnn(5, 2, 3, "float64", "tanh", product=False)
    prepared, links = split_stacked_scatters(prepare(outputs, True))
    assert len(links) == 5
    order = place_links_early(topological_order(prepared), links)
    position = {id(t): k for k, t in enumerate(order)}
    for t in order:
        for r in t.op.input_tensors():
            assert position[id(r)] < position[id(t)]
        if id(t) in links:
            last = max(position[id(r)] for r in t.op.input_tensors())
            assert position[id(t)] == last + 1
    assert order[-1] is prepared[-1] or id(order[-1]) not in links


def test_scatters_not_into_constant_slices_are_kept():
    x = tg.placeholder((6,), dtype="float64", name="x")
    idx = tg.placeholder((4,), dtype="int32", name="idx")
    y = tg.scatter_add((6,), (4,), lambda i: (idx[i],), lambda i: x[i], name="y")
    [kept], links = split_stacked_scatters([y])
    assert kept is y and not links
