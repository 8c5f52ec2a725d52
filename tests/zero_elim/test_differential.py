"""Optimised gradients equal the naive ones, operator by operator, and stay small."""
import numpy as np

import tegrad as tg
from tegrad.ir.graph import topological_order
from tegrad.ir.stages import is_placeholder

def _with_head(operator_case):
    case, out = operator_case
    head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
    case.feed[head] = case.rng.standard_normal(out.shape)
    return case, out, head


def test_optimised_gradient_equals_naive(operator_name, operator_case):
    name = operator_name
    case, out, head = _with_head(operator_case)
    res = tg.differentiate(out, case.inputs, head=head)
    assert res.naive is not None
    optimised = tg.evaluate(list(res), case.feed)
    naive = tg.evaluate(list(res.naive), case.feed)
    for inp, a, b in zip(case.inputs, optimised, naive):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name}: gradient for {inp.name}")


def test_no_gradient_stage_is_larger_than_the_forward_program(operator_name, operator_case):
    name = operator_name
    case, out, head = _with_head(operator_case)
    res = tg.differentiate(out, case.inputs, head=head)
    forward = topological_order([out])
    largest = max([t.size for t in forward] + [head.size])
    for t in topological_order(list(res)):
        if not is_placeholder(t):
            assert t.size <= largest, f"{name}: stage {t.name} {t.shape} exceeds {largest}"


def test_optimisation_never_costs_more_than_the_naive_gradient(operator_name, operator_case):
    name = operator_name
    case, out, head = _with_head(operator_case)
    res = tg.differentiate(out, case.inputs, head=head)
    for g, n in zip(res, res.naive):
        assert tg.cost(g).iterations <= tg.cost(n).iterations, name
