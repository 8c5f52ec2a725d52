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
from tegrad.ir.graph import placeholders
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.lower.program import lower_program, prepare

from support.programs import scatter_fill


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


def test_lowered_operator_and_gradient_match_evaluator_and_cost(operator_name, operator_case):
    inputs, outputs, feed = lowered_program(operator_case)
    kernel = lower_program(inputs, outputs, name=operator_name)
    got, iterations = run(kernel, [feed[t] for t in inputs])
    want = tg.evaluate(outputs, feed)
    for t, g, w in zip(outputs, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=t.name)
    prepared = prepare(outputs)
    assert iterations == tg.cost(prepared).iterations + scatter_fill(inputs, prepared)
