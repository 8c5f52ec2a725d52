"""Reductions of tuples: argmax/argmin with their values and mean_var, against PyTorch,
the evaluator, compiled code (one loop nest for every component) and finite differences."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import tegrad as tg
from tegrad import ops
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.fusion import stage_names, statements


def _rows(draw, dtype):
    """A random 2- or 3-d array with ties, and NaNs in some rows."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=2, max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, size=shape).astype(dtype)  # small integers: many ties
    if draw(st.booleans()):
        a[rng.random(shape) < 0.15] = np.nan
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return a, axis


@st.composite
def arrays_with_axis(draw):
    return _rows(draw, draw(st.sampled_from(["float32", "float64"])))


def _one_statement_writes(inputs, outputs):
    """The lowered program computes ``outputs`` in one top-level statement (nest)."""
    kernel = lower_program(inputs, outputs)
    writers = [stage_names(s) for s in statements(kernel.body)]
    return any(set(w) >= {t.name for t in outputs} for w in writers)


def _reduction_loops(kernel_text):
    return kernel_text.count("for (r0 ")


@settings(max_examples=25, deadline=None)
@given(arrays_with_axis(), st.sampled_from(["max", "min"]), st.booleans())
def test_extremum_with_index_matches_torch(case, which, keepdims):
    a, axis = case
    x = tg.placeholder(a.shape, dtype=a.dtype.name, name="x")
    idx, val = getattr(ops, f"arg{which}_with_value")(x, axis=axis, keepdims=keepdims)
    expected = getattr(torch, which)(torch.from_numpy(a), dim=axis, keepdim=keepdims)
    got = tg.evaluate([idx, val], {x: a})
    np.testing.assert_array_equal(got[1], expected.values.numpy())
    np.testing.assert_array_equal(got[0], expected.indices.numpy())
    f = tg.build([x], [idx, val])
    compiled = f(a)
    np.testing.assert_array_equal(compiled[0], got[0])
    np.testing.assert_array_equal(compiled[1], got[1])
    # both outputs come out of one reduction loop nest
    assert _one_statement_writes([x], [idx, val])


def test_extremum_and_index_are_one_loop_nest():
    x = tg.placeholder((5, 37), name="x")
    idx, val = ops.argmax_with_value(x, axis=1)
    text = tg.build([x], [idx, val]).loops
    assert _reduction_loops(text) == 1 and text.count("= x[") == 1, text
    nest = text[text.index("for (r0 "):]
    assert "argmax_index[" in nest and "argmax_value[" in nest


def test_argmax_over_every_axis_is_the_flat_index():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 4, 5))
    x = tg.placeholder(a.shape, dtype="float64", name="x")
    idx, val = ops.argmax_with_value(x)
    got = tg.evaluate([idx, val], {x: a})
    assert int(got[0]) == int(np.argmax(a)) and float(got[1]) == a.max()
    assert [t.tolist() for t in tg.build([x], [idx, val])(a)] == [t.tolist() for t in got]


def test_value_gradient_goes_to_the_first_maximum_as_in_torch():
    rng = np.random.default_rng(7)
    a = rng.normal(size=(5, 6))
    a[0, 1] = a[0, 4] = 9.0  # a tie: only the first position gets the gradient
    a[2, 3] = np.nan
    head = rng.normal(size=5)
    x = tg.placeholder(a.shape, dtype="float64", name="x")
    h = tg.placeholder((5,), dtype="float64", name="h")
    idx, val = ops.argmax_with_value(x, axis=1)
    (grad,) = tg.differentiate(val, [x], head=h)
    t = torch.tensor(a, requires_grad=True)
    torch.max(t, dim=1).values.backward(torch.tensor(head))
    expected = t.grad.numpy()
    np.testing.assert_array_equal(tg.evaluate(grad, {x: a, h: head}), expected)
    np.testing.assert_array_equal(tg.build([x, h], grad)(a, head)[0], expected)


def test_forward_and_gradient_share_one_nest():
    # the gradient reads the index; built with the forward outputs, its copy of the index
    # stage is the forward one (computed once), so one reduction nest computes all three
    x = tg.placeholder((8, 33), dtype="float64", name="x")
    h = tg.placeholder((8,), dtype="float64", name="h")
    idx, val = ops.argmax_with_value(x, axis=1)
    (grad,) = tg.differentiate(val, [x], head=h)
    f = tg.build([x, h], [idx, val, grad])
    assert _reduction_loops(f.loops) == 1, f.loops
    rng = np.random.default_rng(9)
    a, head = rng.normal(size=(8, 33)), rng.normal(size=8)
    for got, want in zip(f(a, head), tg.evaluate([idx, val, grad], {x: a, h: head})):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("which", ["max", "min"])
def test_value_gradient_against_finite_differences(which):
    x = tg.placeholder((4, 7), dtype="float64", name="x")
    _, val = getattr(ops, f"arg{which}_with_value")(x, axis=0)
    assert tg.testing.check_grad(val, x, head="random", rng=1) < 1e-6


def test_the_indices_have_no_gradient():
    x = tg.placeholder((3, 4), dtype="float64", name="x")
    idx, val = ops.argmax_with_value(x, axis=1)
    assert idx.dtype == "int32"
    with pytest.raises(tg.DTypeError, match="non-float"):
        tg.differentiate(idx, [x])
    y = tg.compute((3,), lambda i: tg.cast(idx[i], "float64") * val[i], name="y")
    a = np.random.default_rng(0).normal(size=(3, 4))
    (grad,) = tg.differentiate(y, [x])
    expected = np.zeros_like(a)
    expected[np.arange(3), a.argmax(axis=1)] = a.argmax(axis=1)
    np.testing.assert_array_equal(tg.evaluate(grad, {x: a}), expected)


@st.composite
def moment_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    axes = draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))
    n = int(np.prod([shape[d] for d in axes]))
    correction = draw(st.sampled_from([c for c in (0, 1) if n - c > 0]))
    return (shape, tuple(sorted(axes)), correction, draw(st.booleans()),
            draw(st.sampled_from(["float32", "float64"])), draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=25, deadline=None)
@given(moment_cases())
def test_mean_var_matches_torch(case):
    shape, axes, correction, keepdims, dtype, seed = case
    a = (np.random.default_rng(seed).normal(size=shape) * 3 + 5).astype(dtype)
    x = tg.placeholder(shape, dtype=dtype, name="x")
    mean, var = ops.mean_var(x, axis=axes, keepdims=keepdims, correction=correction)
    tv, tm = torch.var_mean(torch.from_numpy(a), dim=axes, correction=correction,
                            keepdim=keepdims)
    tol = 1e-5 if dtype == "float32" else 1e-12
    got = tg.evaluate([mean, var], {x: a})
    compiled = tg.build([x], [mean, var])(a)
    for values in (got, compiled):
        assert values[0].dtype == values[1].dtype == np.dtype(dtype)
        np.testing.assert_allclose(values[0], tm.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(values[1], tv.numpy(), rtol=tol, atol=tol)


def test_mean_var_is_one_loop_nest_and_its_gradient_matches_torch():
    rng = np.random.default_rng(11)
    a, head_m, head_v = rng.normal(size=(6, 9)), rng.normal(size=6), rng.normal(size=6)
    x = tg.placeholder(a.shape, dtype="float64", name="x")
    hm = tg.placeholder((6,), dtype="float64", name="hm")
    hv = tg.placeholder((6,), dtype="float64", name="hv")
    mean, var = ops.mean_var(x, axis=1, correction=1)
    f = tg.build([x], [mean, var])
    assert _reduction_loops(f.loops) == 1, f.loops
    loss = tg.compute((6,), lambda i: mean[i] * hm[i] + var[i] * hv[i], name="loss")
    (grad,) = tg.differentiate(loss, [x])
    t = torch.tensor(a, requires_grad=True)
    tv, tm = torch.var_mean(t, dim=1, correction=1)
    (tm * torch.tensor(head_m) + tv * torch.tensor(head_v)).sum().backward()
    feed = {x: a, hm: head_m, hv: head_v}
    np.testing.assert_allclose(tg.evaluate(grad, feed), t.grad.numpy(), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(tg.build([x, hm, hv], grad)(a, head_m, head_v)[0],
                               t.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert tg.testing.check_grad(var, x, head="random", rng=2) < 1e-6


def test_mean_var_keeps_its_digits_far_from_zero():
    # float32 values 1e4 away from zero with a spread of 1e-1: a sum of squares less the
    # squared sum loses every digit of the variance; Chan's update in float64 keeps them
    rng = np.random.default_rng(5)
    a = (1e4 + 0.1 * rng.normal(size=(4, 4096))).astype("float32")
    x = tg.placeholder(a.shape, dtype="float32", name="x")
    _, var = ops.mean_var(x, axis=1)
    exact = a.astype(np.float64).var(axis=1)
    naive = (a * a).mean(axis=1, dtype=np.float32) - a.mean(axis=1, dtype=np.float32) ** 2
    assert np.max(np.abs(naive - exact) / exact) > 1.0  # the naive formula is useless here
    for got in (tg.evaluate(var, {x: a}), tg.build([x], var)(a)[0]):
        np.testing.assert_allclose(got, exact, rtol=1e-6)


def test_mean_var_of_integers_is_float64():
    a = np.array([[1, 2, 4], [3, 3, 3]], dtype="int32")
    x = tg.placeholder(a.shape, dtype="int32", name="x")
    mean, var = ops.mean_var(x, axis=1)
    got = tg.evaluate([mean, var], {x: a})
    assert got[0].dtype == got[1].dtype == np.float64
    np.testing.assert_allclose(got[0], a.mean(axis=1))
    np.testing.assert_allclose(got[1], a.var(axis=1))


def test_mean_var_checks_its_arguments():
    x = tg.placeholder((1, 3), name="x")
    with pytest.raises(tg.TegradError, match="mean_var: .*correction 1 divides by zero"):
        ops.mean_var(x, axis=0, correction=1)
    with pytest.raises(tg.TegradError, match="mean_var: correction must be"):
        ops.mean_var(x, correction=-1)
    with pytest.raises(tg.TegradError, match="argmax_with_value: axis must be None or an"):
        ops.argmax_with_value(x, axis=(0, 1))
