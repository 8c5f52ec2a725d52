"""Optimised gradients equal the naive ones, operator by operator, and stay small."""
import importlib.util
import pathlib
import zlib

import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.graph import topological_order
from tegrad.ir.tensor import PlaceholderOp

_PATH = pathlib.Path(__file__).resolve().parent.parent / "autodiff" / "test_operator_gradients.py"
_SPEC = importlib.util.spec_from_file_location("operator_gradients_table", _PATH)
TABLE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(TABLE)


def _build(name):
    case = TABLE.Case(zlib.crc32(name.encode()))
    out = TABLE._first(TABLE.OPS[name](case))
    head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
    case.feed[head] = case.rng.standard_normal(out.shape)
    return case, out, head


@pytest.mark.parametrize("name", sorted(TABLE.OPS))
def test_optimised_gradient_equals_naive(name):
    case, out, head = _build(name)
    res = tg.differentiate(out, case.inputs, head=head)
    assert res.naive is not None
    optimised = tg.evaluate(list(res), case.feed)
    naive = tg.evaluate(list(res.naive), case.feed)
    for inp, a, b in zip(case.inputs, optimised, naive):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name}: gradient for {inp.name}")


@pytest.mark.parametrize("name", sorted(TABLE.OPS))
def test_no_gradient_stage_is_larger_than_the_forward_program(name):
    case, out, head = _build(name)
    res = tg.differentiate(out, case.inputs, head=head)
    forward = topological_order([out])
    largest = max([t.size for t in forward] + [head.size])
    for t in topological_order(list(res)):
        if not isinstance(t.op, PlaceholderOp):
            assert t.size <= largest, f"{name}: stage {t.name} {t.shape} exceeds {largest}"


@pytest.mark.parametrize("name", sorted(TABLE.OPS))
def test_optimisation_never_costs_more_than_the_naive_gradient(name):
    case, out, head = _build(name)
    res = tg.differentiate(out, case.inputs, head=head)
    for g, n in zip(res, res.naive):
        assert tg.cost(g).iterations <= tg.cost(n).iterations, name
