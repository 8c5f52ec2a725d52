"""Every operator of the library with its optimised gradient, lowered to loops.

For each entry of the operator-gradient table of tests/conftest.py (tiny float64
shapes), the forward and the zero-eliminated gradient of every input with a random head
are lowered into one kernel and run by the loop-IR interpreter: the results equal
``tg.evaluate``'s, and the points the loops visit equal ``tg.cost``'s ``iterations`` of
the lowered program (the cost model does not count filling a scatter's output before it
accumulates, so that is added).
"""
import numpy as np

import tegrad as tg
from tegrad.ir.graph import placeholders, topological_order
from tegrad.ir.mapper import tensors_read
from tegrad.ir.stages import stage_exprs
from tegrad.ir.tensor import ScatterOp
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.lower.program import lower_program, prepare


def lowered_program(operator_case):
    case, out = operator_case
    head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
    case.feed[head] = case.rng.standard_normal(out.shape)
    res = tg.differentiate(out, case.inputs, head=head)
    outputs = [out] + list(res)
    inputs = placeholders(outputs)
    for t in inputs:
        if t not in case.feed:  # a placeholder the table feeds by name
            case.feed[t] = case.rng.standard_normal(t.shape).astype(t.dtype)
    return inputs, outputs, case.feed


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


def test_lowered_operator_and_gradient_match_evaluator_and_cost(operator_name, operator_case):
    inputs, outputs, feed = lowered_program(operator_case)
    kernel = lower_program(inputs, outputs, name=operator_name)
    got, iterations = run(kernel, [feed[t] for t in inputs])
    want = tg.evaluate(outputs, feed)
    for t, g, w in zip(outputs, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=t.name)
    prepared = prepare(outputs)
    assert iterations == tg.cost(prepared).iterations + scatter_fill(inputs, prepared)
