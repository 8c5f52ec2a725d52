"""Programs and facts about programs that several test files use.

``matmul`` and ``mlp_gradient`` build the pipeline's and the export tests' programs;
``forward_and_gradient`` makes an entry of the operator-gradient table
(``tests/conftest.py``) into one program of the operator and its optimised gradient;
``scatter_fill`` counts what the loops of a lowered program visit beyond ``tg.cost``.
"""
import numpy as np

import tegrad as tg
from tegrad import nn
from tegrad.ir.graph import placeholders, topological_order
from tegrad.ir.mapper import tensors_read
from tegrad.ir.stages import stage_exprs
from tegrad.ir.tensor import ScatterOp


def matmul(m=64, k=64, n=64):
    """An ``m x k`` by ``k x n`` float32 matrix product."""
    a = tg.placeholder((m, k), name="a")
    b = tg.placeholder((k, n), name="b")
    r = tg.reduce_axis((0, k), name="r")
    c = tg.compute((m, n), lambda i, j: tg.sum(a[i, r] * b[r, j], axis=r), name="c")
    return [a, b], [c]


def mlp_gradient():
    """A two-layer MLP's loss and its gradients for the four weights (batch 32, 64 -> 128
    -> 10)."""
    x = tg.placeholder((32, 64), name="x")
    labels = tg.placeholder((32,), dtype="int32", name="labels")
    weights = [tg.placeholder((128, 64), name="w1"), tg.placeholder((128,), name="b1"),
               tg.placeholder((10, 128), name="w2"), tg.placeholder((10,), name="b2")]
    w1, b1, w2, b2 = weights
    loss = nn.softmax_cross_entropy(nn.dense(nn.relu(nn.dense(x, w1, b1)), w2, b2), labels)
    return [x, labels] + weights, [loss] + list(tg.differentiate(loss, weights))


def forward_and_gradient(operator_case_of, name, dtype):
    """``(inputs, outputs, feed)``: the operator-table entry ``name`` built in ``dtype`` (by
    the fixture ``operator_case_of``), with its optimised gradient for a random head."""
    case, out = operator_case_of(name, dtype)
    head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
    case.feed[head] = case.rng.standard_normal(out.shape)
    outputs = [out] + list(tg.differentiate(out, case.inputs, head=head).optimized())
    inputs = placeholders(outputs)
    feed = {}
    for t in inputs:
        value = case.feed[t] if t in case.feed else case.rng.standard_normal(t.shape)
        feed[t] = np.asarray(value).astype(t.dtype)
    return inputs, outputs, feed


def scatter_fill(inputs, outputs):
    """Elements of the scatters' outputs filled before they accumulate (zeros, or a copy
    of an ``init`` that is an argument or read elsewhere)."""
    order = topological_order(outputs)
    reads = [r for t in order for e in stage_exprs(t) for r in tensors_read(e)]
    args = {id(t) for t in inputs} | {id(t) for t in outputs}
    fill = 0
    for t in order:
        if isinstance(t.op, ScatterOp):
            init = t.op.init
            in_place = (init is not None and id(init) not in args
                        and not any(r is init for r in reads)
                        and sum(1 for s in order if isinstance(s.op, ScatterOp)
                                and s.op.init is init) == 1)
            fill += 0 if in_place else t.size
    return fill
