"""Temporaries written in place: a temporary computed elementwise from a temporary that
dies with it takes that one's memory (``StoragePlan.in_place``).

Random chains of elementwise loop nests, with and without the condition holding (the
old buffer read at other indices, read again after the store, or read by a later
statement), compiled on 1 and 2 threads equal the loop interpreter (which keeps every
buffer apart), and the plan merges exactly the pairs meeting the condition; the
gradient of a dense -> gelu -> dense network puts the gradient of the first dense
layer's output in the memory of a buffer it is computed from, and equals
``tg.evaluate`` and PyTorch; random elementwise programs and their gradients compiled
equal ``tg.evaluate``.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.ir.expr import Const, Var
from tegrad.codegen.loops.mapper import buffers_of
from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.llvm.kernel_buffers import in_place_kernel, plan_storage
from tegrad.codegen.runtime.executable import Executable

from support.compare import executable_twice_equals_interpreter

I, J = Var("i", "int64"), Var("j", "int64")
MODES = ("same", "shifted", "after")


def _c(v, dtype="int64"):
    return Const(v, dtype)


@st.composite
def chains(draw):
    """``(kernel, expected)``: statement 0 writes ``t0`` from the input ``x``; statement
    ``k`` writes ``t{k}`` from ``t{k-1}``, read at the store's indices (``same``), at
    the mirrored column (``shifted``), or at the store's indices and once more after the
    store, by a second temporary ``s{k}`` (``after``); ``later[k]``: statement ``k + 1``
    (or the output's) reads ``t{k-1}`` too, at the mirrored column. ``expected``: the
    ``(new, old)`` names the condition allows."""
    dtype = draw(st.sampled_from(["float32", "float64"]))
    n, m = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    stages = draw(st.integers(1, 5))
    outer = draw(st.sampled_from(["serial", "parallel"]))
    inner = draw(st.sampled_from(["serial", "vectorized"]))
    x = Buffer("x", (n, m), dtype, "input")
    out = Buffer("out", (n, m), dtype, "output")
    t = [Buffer(f"t{k}", (n, m), dtype) for k in range(stages + 1)]
    modes = [None] + [draw(st.sampled_from(MODES)) for _ in range(stages)]
    later = [False] + [draw(st.booleans()) for _ in range(stages)]
    s = {k: Buffer(f"s{k}", (n, m), dtype) for k in range(1, stages + 1)
         if modes[k] == "after"}
    mirrored = (I, _c(m - 1) - J)

    def nest(*stores):
        body = stores[0] if len(stores) == 1 else Block(stores)
        return For(I, _c(0), _c(n), For(J, _c(0), _c(m), body, kind=inner), kind=outer)

    def extra(k):  # statement k reads t{k-2} again when stage k-1 says so
        return Load(t[k - 2], mirrored) if k >= 2 and later[k - 1] else _c(0.0, dtype)

    stmts = [nest(Store(t[0], (I, J), Load(x, (I, J)) * 0.5 + 1.0))]
    for k in range(1, stages + 1):
        read = Load(t[k - 1], mirrored if modes[k] == "shifted" else (I, J))
        value = read * (0.25 * k + 0.5) + Load(x, (I, J)) + extra(k)
        stores = [Store(t[k], (I, J), value)]
        if modes[k] == "after":
            stores.append(Store(s[k], (I, J), Load(t[k - 1], (I, J)) - Load(t[k], (I, J))))
        stmts.append(nest(*stores))
    total = Load(t[stages], (I, J)) + extra(stages + 1)
    for b in s.values():
        total = total + Load(b, (I, J))
    stmts.append(nest(Store(out, (I, J), total)))
    temps = [b for k in range(stages + 1) for b in ([t[k]] + ([s[k]] if k in s else []))]
    expected = set()
    for k in range(1, stages + 1):
        if later[k]:
            continue
        if modes[k] == "same":
            expected.add((f"t{k}", f"t{k - 1}"))
        elif modes[k] == "after":
            expected.add((f"s{k}", f"t{k - 1}"))
    return Kernel("chain", (x, out), tuple(temps), Block(tuple(stmts))), expected


@settings(max_examples=25, deadline=None)
@given(chains(), st.integers(0, 2**31 - 1))
def test_random_chains_merge_exactly_the_pairs_meeting_the_condition(case, seed):
    kernel, expected = case
    plan = plan_storage(kernel.body, list(kernel.temps))
    assert {(a.name, b.name) for a, b in plan.in_place.items()} == expected
    for new, old in plan.in_place.items():
        assert plan.offsets[new] == plan.offsets[old] and plan.sharing(new, old)
    # emitted with each merged temporary named as its chain's first: no statement holds
    # two buffers sharing memory
    renamed = in_place_kernel(kernel, plan)
    for stmt in renamed.body.stmts:
        used = set(buffers_of(stmt)[0])
        assert not any(plan.sharing(a, b) for a in used for b in used)
    for threads in (1, 2):
        exe = executable_twice_equals_interpreter(kernel, seed, threads=threads)
        assert {(a.name, b.name) for a, b in exe.storage_plan.in_place.items()} == expected


def _loop(n, dst, value):
    return For(I, _c(0), _c(n), Store(dst, (I,), value))


def _chain_kernel(n):
    """``t0 = x + 1``, ``t1 = 2 t0``, ``t2 = t1 - 3``, ``out = t2 x``."""
    x = Buffer("x", (n,), "float64", "input")
    out = Buffer("out", (n,), "float64", "output")
    t = [Buffer(f"t{k}", (n,), "float64") for k in range(3)]
    return Kernel("k", (x, out), tuple(t), Block((
        _loop(n, t[0], Load(x, (I,)) + 1.0), _loop(n, t[1], Load(t[0], (I,)) * 2.0),
        _loop(n, t[2], Load(t[1], (I,)) - 3.0),
        _loop(n, out, Load(t[2], (I,)) * Load(x, (I,))))))


def test_a_chain_takes_one_place():
    """``t1 <- t0`` and ``t2 <- t1``: the three at one offset, the block one buffer."""
    n = 1024
    kernel = _chain_kernel(n)
    t = kernel.temps
    exe = Executable(kernel, threads=1)
    plan = exe.storage_plan
    assert plan.in_place == {t[1]: t[0], t[2]: t[1]}
    assert len({plan.offsets[b] for b in t}) == 1 and plan.nbytes == n * 8
    data = np.linspace(-1, 1, n)
    got = np.empty(n)
    exe.run([data, got])
    np.testing.assert_array_equal(got, ((data + 1.0) * 2.0 - 3.0) * data)


def _gather_kernel(n):
    """``t1 = t0 + 1`` elementwise from ``t0 = 2 x``; the output reads ``t1`` at indices
    loaded from ``idx``."""
    x = Buffer("x", (n,), "float64", "input")
    idx = Buffer("idx", (n,), "int64", "input")
    out = Buffer("out", (n,), "float64", "output")
    t0, t1 = Buffer("t0", (n,), "float64"), Buffer("t1", (n,), "float64")
    return Kernel("gather", (x, idx, out), (t0, t1), Block((
        _loop(n, t0, Load(x, (I,)) * 2.0), _loop(n, t1, Load(t0, (I,)) + 1.0),
        _loop(n, out, Load(t1, (Load(idx, (I,)),))))))


def test_a_temporary_read_at_loaded_indices_keeps_its_memory_and_name():
    """A check of a loaded index names the buffer read: ``t1`` is not written over
    ``t0`` (its accesses would name ``t0``), and a bad index names ``t1``."""
    n = 8
    exe = Executable(_gather_kernel(n), threads=1)
    assert exe.storage_plan.in_place == {}
    x, out = np.arange(n, dtype=np.float64), np.empty(n)
    exe.run([x, np.arange(n)[::-1].copy(), out])
    np.testing.assert_array_equal(out, (2 * x + 1)[::-1])
    with pytest.raises(tg.TegradError, match="t1"):
        exe.run([x, np.full(n, n), out])


def test_no_temporary_is_written_in_place_when_every_index_is_checked():
    kernel = _chain_kernel(64)
    assert Executable(kernel, threads=1).storage_plan.in_place
    assert Executable(kernel, threads=1, check_bounds=True).storage_plan.in_place == {}


def _mlp(batch, d, hidden, dtype):
    x = tg.placeholder((batch, d), dtype=dtype, name="x")
    w1 = tg.placeholder((hidden, d), dtype=dtype, name="w1")
    w2 = tg.placeholder((d, hidden), dtype=dtype, name="w2")
    y = nn.dense(nn.gelu(nn.dense(x, w1)), w2)
    r, c = tg.reduce_axis((0, batch), name="r"), tg.reduce_axis((0, d), name="c")
    loss = tg.compute((), lambda: tg.sum(y[r, c] * y[r, c], axis=[r, c]), name="loss")
    return [x, w1, w2], loss


@pytest.mark.parametrize("threads", [1, 2])
def test_the_gradient_of_a_dense_gelu_dense_network_writes_in_place(threads):
    """The gradient at the first dense layer's output (``dgelu`` times gelu's derivative
    at ``dense``) is computed elementwise from two temporaries that die there: it takes
    the memory of one of them, and the step equals ``tg.evaluate`` and PyTorch."""
    batch, d, hidden = 16, 24, 64
    inputs, loss = _mlp(batch, d, hidden, "float64")
    grads = tg.differentiate(loss, inputs[1:])
    f = tg.build(inputs, [loss, *grads], threads=threads)
    plan = f._executable.storage_plan
    merged = {(a.name, b.name) for a, b in plan.in_place.items()}
    assert merged & {("ddense_1", "dense"), ("ddense_1", "dgelu")}, merged
    for new, old in plan.in_place.items():
        assert plan.offsets[new] == plan.offsets[old]
    assert f.memory.workspace < f.memory.workspace_unshared
    rng = np.random.default_rng(threads)
    arrays = [rng.normal(size=t.shape) * 0.3 for t in inputs]
    got = f(*arrays)
    for a, b in zip(got, tg.evaluate([loss, *grads], dict(zip(inputs, arrays)))):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    tx, tw1, tw2 = (torch.tensor(a, requires_grad=True) for a in arrays)
    ty = torch.nn.functional.gelu(tx @ tw1.T) @ tw2.T
    (ty * ty).sum().backward()
    for a, b in zip(got[1:], (tw1.grad, tw2.grad)):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-9)


UNARY = {"tanh": tg.tanh, "exp": lambda v: tg.exp(v * 0.1), "square": lambda v: v * v,
         "scale": lambda v: v * 1.5 - 0.25}


@st.composite
def layered_programs(draw):
    """``(inputs, outputs)``: a chain of stages over ``(n, m)`` values, each a random
    elementwise function of the one before (maybe plus the input ``b``) or its product
    with the ``(m, m)`` weight ``w`` (a stage of its own, so the elementwise stages of
    the gradient are top-level statements between products); the sum of the last the
    loss, the outputs its gradients too."""
    n, m = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    a = tg.placeholder((n, m), dtype="float64", name="a")
    b = tg.placeholder((n, m), dtype="float64", name="b")
    w = tg.placeholder((m, m), dtype="float64", name="w")
    h = a
    for k in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(sorted(UNARY) + ["product"]))
        if kind == "product":
            r = tg.reduce_axis((0, m), name=f"p{k}")
            h = tg.compute((n, m), lambda i, j, h=h, r=r: tg.sum(h[i, r] * w[r, j], axis=r),
                           name=f"h{k}")
        else:
            f, plus = UNARY[kind], draw(st.booleans())
            h = tg.compute((n, m), lambda i, j, h=h, f=f, plus=plus:
                           f(h[i, j]) + (b[i, j] if plus else 0.0), name=f"h{k}")
    r, c = tg.reduce_axis((0, n), name="r"), tg.reduce_axis((0, m), name="c")
    loss = tg.compute((), lambda: tg.sum(h[r, c], axis=[r, c]), name="loss")
    return [a, b, w], [loss, *tg.differentiate(loss, [a, b, w])]


@settings(max_examples=10, deadline=None)
@given(layered_programs(), st.integers(0, 2**31 - 1))
def test_random_layered_gradients_equal_the_evaluator(program, seed):
    inputs, outputs = program
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, t.shape) for t in inputs]
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    for threads in (1, 2):
        f = tg.build(inputs, outputs, threads=threads)
        plan = f._executable.storage_plan  # (about 4 programs in 10 merge a pair)
        assert all(plan.offsets[n] == plan.offsets[o] for n, o in plan.in_place.items())
        for a, b in zip(f(*arrays), want):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
