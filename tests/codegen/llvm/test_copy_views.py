"""Copies that take no memory (``StoragePlan.views``): a temporary stored element for
element from another at the same flat offset (a reshape) is placed at that one's memory
and its stores are dropped.

Random kernels holding a copy of a temporary under another shape (the source computed
from an input; the copy in a nest of its own or fused after another store; the output
reading the copy whole, at mirrored indices, or by a product-like sum), with and without
the condition holding (the source written again after the copy, the copy's value cast or
scaled, its indices transposed, the copy accumulated to afterwards, a second writer),
compiled on 1 and 2 threads equal the loop interpreter (which keeps every buffer apart),
and the plan takes exactly the views meeting the condition; programs reading a reshape
of a computed tensor several times, with their gradients (softmax cross-entropy over
the reshaped logits of a dense layer, as a language model's loss), compiled equal
``tg.evaluate`` and PyTorch and take the reshapes as views.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.codegen.llvm.kernel_buffers import plan_storage
from tegrad.codegen.loops.interpret import run as interpret
from tegrad.codegen.loops.nodes import Accumulate, Block, Buffer, For, Kernel, Load, Store
from tegrad.codegen.lower.copy_views import copy_views
from tegrad.codegen.runtime.executable import Executable
from tegrad.ir.expr import Cast, Const, Var

from support.compare import executable_twice_equals_interpreter

MODES = ("view", "source_written_after", "cast", "scaled", "transposed", "accumulated",
         "second_writer")


def _c(v, dtype="int64"):
    return Const(v, dtype)


def _nest(variables, extents, body, inner="serial"):
    for k, (v, n) in reversed(list(enumerate(zip(variables, extents)))):
        body = For(v, _c(0), _c(n), body, kind=inner if k == len(extents) - 1 else "serial")
    return body


@st.composite
def copies(draw):
    """``(kernel, viewed)``: ``s`` (shape ``a x b x c``) from the input ``x``; ``d``
    (shape ``a*b x c``) a copy of it; the output from ``d``. ``viewed``: whether the
    condition holds (mode ``view``)."""
    dtype = draw(st.sampled_from(["float32", "float64"]))
    a, b, c = draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.integers(1, 40))
    mode = draw(st.sampled_from(MODES))
    fused = draw(st.booleans()) and mode != "source_written_after"
    inner = draw(st.sampled_from(["serial", "vectorized"]))
    i, j, k, r = (Var(n, "int64") for n in "ijkr")
    x = Buffer("x", (a, b, c), dtype, "input")
    s = Buffer("s", (a, b, c), dtype)
    d = Buffer("d", (a * b, c), dtype)
    other = Buffer("other", (a, b, c), dtype)
    out = Buffer("out", (a * b, c), dtype, "output")
    if mode == "transposed" and a * b == 1:
        mode = "view"  # (no other order)
    src = Load(s, (i, j, k))
    if mode == "cast":
        value = Cast(Cast(src, "float64" if dtype == "float32" else "float32"), dtype)
    elif mode == "scaled":
        value = src * 2.0
    else:
        value = src
    row = (_c(a * b - 1) - (i * b + j)) if mode == "transposed" else i * b + j
    copy = Store(d, (row, k), value)
    stmts = [_nest((i, j, k), (a, b, c), Store(s, (i, j, k), Load(x, (i, j, k)) * 0.5 + 1.0),
                   inner)]
    if fused:
        stmts.append(_nest((i, j, k), (a, b, c), Block((
            Store(other, (i, j, k), Load(s, (i, j, k)) - 1.0), copy)), inner))
    else:
        stmts.append(_nest((i, j, k), (a, b, c), copy, inner))
        stmts.append(_nest((i, j, k), (a, b, c),
                           Store(other, (i, j, k), Load(s, (i, j, k)) - 1.0), inner))
    if mode == "source_written_after":
        stmts.append(_nest((i, j, k), (a, b, c), Store(s, (i, j, k), _c(7.0, dtype)), inner))
    if mode == "accumulated":
        stmts.append(_nest((r, k), (a * b, c), Accumulate(d, (r, k), _c(1.0, dtype), tg.sum),
                           inner))
    if mode == "second_writer":
        stmts.append(_nest((k,), (c,), Store(d, (_c(0), k), _c(3.0, dtype)), inner))
    read = draw(st.sampled_from(["whole", "mirrored", "row_sum"]))
    if read == "whole":
        value = Load(d, (r, k))
    elif read == "mirrored":
        value = Load(d, (_c(a * b - 1) - r, _c(c - 1) - k))
    else:
        value = Load(d, (r, _c(0)))
        for kk in range(1, min(c, 4)):
            value = value + Load(d, (r, _c(kk)))
    value = value + Load(other, (_c(0), _c(0), _c(0))) + Load(s, (_c(0), _c(0), _c(0)))
    stmts.append(_nest((r, k), (a * b, c), Store(out, (r, k), value), inner))
    kernel = Kernel("copies", (x, out), (s, d, other), Block(tuple(stmts)))
    return kernel, mode == "view"


@settings(max_examples=25, deadline=None)
@given(copies(), st.integers(0, 2**31 - 1))
def test_random_copies_are_views_exactly_where_the_condition_holds(case, seed):
    kernel, viewed = case
    s, d, _ = kernel.temps
    plan = plan_storage(kernel.body, list(kernel.temps))
    assert plan.views == ({d: s} if viewed else {})
    if viewed:
        assert plan.offsets[d] == plan.offsets[s]
    for threads in (1, 2):
        for check_bounds in (False, True):
            exe = executable_twice_equals_interpreter(kernel, seed, threads=threads,
                                                      check_bounds=check_bounds)
            assert (d in exe.storage_plan.views) == viewed


def test_a_view_of_a_view_keeps_the_second_copy():
    """``d2`` copies ``d``, itself a view of ``s``: one of them is a view (the source
    of a view is not one itself), and the result is unchanged."""
    i, j = Var("i", "int64"), Var("j", "int64")
    x = Buffer("x", (4, 6), "float64", "input")
    s, d, d2 = Buffer("s", (4, 6), "float64"), Buffer("d", (24,), "float64"), \
        Buffer("d2", (6, 4), "float64")
    out = Buffer("out", (6, 4), "float64", "output")
    body = Block((
        _nest((i, j), (4, 6), Store(s, (i, j), Load(x, (i, j)) + 1.0)),
        _nest((i, j), (4, 6), Store(d, (i * 6 + j,), Load(s, (i, j)))),
        _nest((i, j), (6, 4), Store(d2, (i, j), Load(d, (i * 4 + j,)))),
        _nest((i, j), (6, 4), Store(out, (i, j), Load(d2, (i, j)) * Load(d, (i * 4 + j,))))))
    kernel = Kernel("views", (x, out), (s, d, d2), body)
    views = copy_views(body, [s, d, d2])
    assert len(views) == 1 and (views.get(d) is s or views.get(d2) is d)
    data = np.arange(24.0).reshape(4, 6)
    (want,), _ = interpret(kernel, [data])
    got = np.empty((6, 4))
    Executable(kernel, threads=1).run([data, got])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, ((data + 1.0) ** 2).reshape(6, 4))


def _language_model_loss(batch, seq, d, vocab, dtype):
    """Dense logits of shape (batch, seq, vocab), reshaped to (batch*seq, vocab) for a
    softmax cross-entropy: the reshape is read by the row maximum, the row sum and the
    loss; its gradient is reshaped back for the dense layer's."""
    x = tg.placeholder((batch, seq, d), dtype=dtype, name="x")
    w = tg.placeholder((vocab, d), dtype=dtype, name="w")
    b = tg.placeholder((vocab,), dtype=dtype, name="b")
    labels = tg.placeholder((batch, seq), dtype="int32", name="labels")
    logits = nn.dense(nn.gelu(x), w, b)
    loss = nn.softmax_cross_entropy(logits.reshape(batch * seq, vocab),
                                    labels.reshape(batch * seq))
    return [x, w, b, labels], loss


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes", [(2, 3, 5, 7), (4, 16, 32, 48), (3, 17, 24, 96)])
def test_a_reshaped_loss_reads_the_logits_memory(threads, sizes):
    batch, seq, d, vocab = sizes
    inputs, loss = _language_model_loss(batch, seq, d, vocab, "float64")
    grads = tg.differentiate(loss, inputs[:3])
    f = tg.build(inputs, [loss, *grads], threads=threads)
    views = {a.name: s.name for a, s in f._executable.storage_plan.views.items()}
    assert views.get("reshape") == "dense", views
    rng = np.random.default_rng(sum(sizes))
    feed = [rng.standard_normal(t.shape) for t in inputs[:3]]
    feed.append(rng.integers(0, vocab, (batch, seq)).astype(np.int32))
    got = f(*feed)
    want = tg.evaluate([loss, *grads], dict(zip(inputs, feed)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in feed[:3])
    logits = torch.nn.functional.linear(torch.nn.functional.gelu(tx), tw, tb)
    tl = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                           torch.tensor(feed[3]).long().reshape(-1))
    tl.backward()
    for g, t in zip(got, [tl, tx.grad, tw.grad, tb.grad]):
        np.testing.assert_allclose(g, t.detach().numpy(), rtol=1e-9, atol=1e-12)
