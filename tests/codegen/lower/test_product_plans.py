"""Contraction detection from access patterns, and its gemm plan run against tg.evaluate."""

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.lower.product_plans import (ACC, detect_contraction, gemm_plan,
                                                row_major_strides)
from tegrad.codegen.kernels.gemm import compile_gemm


def pooled_gemm(spec, blocking=None):
    """The compiled kernel, threaded however small the product (to test the pool)."""
    return compile_gemm(spec, blocking, min_flops_per_thread=1)


def run_plan(plan, feed, threads=1):
    """The contraction's output computed by the plan's kernel (operands at their offsets)."""
    spec = plan.spec
    f = pooled_gemm(spec)
    # a padded operand is read from a zero-padded copy
    lhs = np.ascontiguousarray(np.pad(feed[plan.lhs], plan.lhs_padding or 0), spec.dtype)
    rhs = np.ascontiguousarray(np.pad(feed[plan.rhs], plan.rhs_padding or 0), spec.dtype)
    out = np.full(spec.batch * spec.m * spec.n, np.nan, spec.dtype)
    size = lhs.itemsize
    f.call_pointers(lhs.ctypes.data + plan.lhs_offset * size,
                    rhs.ctypes.data + plan.rhs_offset * size, out.ctypes.data, threads)
    return out


def check_plan(t, feed, rtol):
    c = detect_contraction(t)
    plan = gemm_plan(c)
    assert plan is not None
    expected = tg.evaluate(t, feed)
    # the kernel writes the output in its own layout, swapped operands or not
    got = run_plan(plan, feed, threads=2).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    return c, plan


def feeds(*tensors, seed=0):
    rng = np.random.default_rng(seed)
    return {x: rng.standard_normal(x.shape).astype(x.dtype) for x in tensors}


def test_matmul():
    a, b = tg.placeholder((9, 7), name="a"), tg.placeholder((7, 20), name="b")
    c, plan = check_plan(tg.ops.matmul(a, b), feeds(a, b), 1e-5)
    assert (c.m_axes, c.n_axes, c.batch_axes, c.k_axes) == (("ax0",), ("ax1",), (), ("rk",))
    assert c.a.tensor is a and c.b.tensor is b
    assert c.a.strides == {"ax0": 7, "rk": 1} and c.b.strides == {"rk": 20, "ax1": 1}
    assert (plan.spec.m, plan.spec.n, plan.spec.k) == (9, 20, 7) and not plan.swapped


def test_dense_reads_the_weight_transposed():
    x, w = tg.placeholder((5, 6), name="x", dtype="float64"), tg.placeholder(
        (11, 6), name="w", dtype="float64")
    c, plan = check_plan(tg.nn.dense(x, w), feeds(x, w), 1e-12)
    assert c.n_axes == ("ax1",) and c.b.strides == {"ax1": 6, "rk": 1}
    assert plan.spec.b_strides[1:] == (1, 6)


def test_dense_bias_is_an_epilogue():
    x, w, bias = (tg.placeholder(s, name=n) for s, n in (((5, 6), "x"), ((11, 6), "w"),
                                                          ((11,), "bias")))
    c = detect_contraction(tg.nn.dense(x, w, bias))
    assert c is not None and c.epilogue is not None
    assert ACC in str(c.epilogue) and "bias" in str(c.epilogue)


def test_batched_matmul_and_broadcast_batch():
    a, b = tg.placeholder((3, 8, 5), name="a"), tg.placeholder((3, 5, 4), name="b")
    c, plan = check_plan(tg.ops.matmul(a, b), feeds(a, b), 1e-5)
    assert c.batch_axes == ("ax0",) and plan.spec.batch == 3
    # (3, 8, 5) @ (5, 4): the batch axis is read by a only, so it is an m axis, merged
    b2 = tg.placeholder((5, 4), name="b2")
    c, plan = check_plan(tg.ops.matmul(a, b2), feeds(a, b2), 1e-5)
    assert c.m_axes == ("ax0", "ax1") and plan.spec.m == 24 and plan.spec.batch == 1


def test_transposed_operand_and_transposed_output():
    a, b = tg.placeholder((7, 9), name="a"), tg.placeholder((12, 7), name="b")
    k = tg.reduce_axis((0, 7), name="k")
    # out[j, i] = sum_k a[k, i] * b[j, k]: the output's stride-1 axis i is read by a
    t = tg.compute((12, 9), lambda j, i: tg.sum(a[k, i] * b[j, k], axis=k), name="t")
    c, plan = check_plan(t, feeds(a, b), 1e-5)
    assert c.m_axes == ("i",) and c.n_axes == ("j",) and plan.swapped
    assert plan.lhs is b and plan.rhs is a


def test_users_einsum_with_offsets_and_casts():
    # out[p, i, j] = sum_{k, l} A[i, l, p, k + 1] * B[l, k, j, p] (a user's own stage)
    A = tg.placeholder((4, 3, 2, 6), name="A", dtype="float64")
    B = tg.placeholder((3, 5, 7, 2), name="B", dtype="float64")
    k, l = tg.reduce_axis((0, 5), name="k"), tg.reduce_axis((0, 3), name="l")
    t = tg.compute((2, 4, 7), lambda p, i, j: tg.sum(A[i, l, p, k + 1] * B[l, k, j, p],
                                                     axis=[k, l]), name="t")
    c = detect_contraction(t)
    assert (c.m_axes, c.n_axes, c.batch_axes, set(c.k_axes)) == (("i",), ("j",), ("p",),
                                                                 {"k", "l"})
    assert c.a.offset == 1 and c.a.strides["k"] == 1 and c.b.strides["p"] == 1
    # its k and l do not merge into one strided axis: a reduction offset table
    c, plan = check_plan(t, feeds(A, B), 1e-12)
    assert plan.spec.k_offsets is not None and len(plan.spec.k_offsets) == 15
    # float32 reads accumulated in float64: detected, with the casts recorded
    a32, b32 = tg.placeholder((4, 6), name="a32"), tg.placeholder((6, 3), name="b32")
    r = tg.reduce_axis((0, 6), name="r")
    t2 = tg.compute((4, 3), lambda i, j: tg.sum(tg.cast(a32[i, r], "float64") *
                                                tg.cast(b32[r, j], "float64"), axis=r))
    c2 = detect_contraction(t2)
    assert c2.a.has_cast and c2.dtype == "float64" and gemm_plan(c2) is None


def test_reduction_with_offset_lower_bound():
    a, b = tg.placeholder((6, 10), name="a"), tg.placeholder((10, 4), name="b")
    k = tg.reduce_axis((3, 9), name="k")
    t = tg.compute((6, 4), lambda i, j: tg.sum(a[i, k] * b[k, j], axis=k), name="t")
    c, plan = check_plan(t, feeds(a, b), 1e-5)
    assert c.lows["k"] == 3 and plan.lhs_offset == 3 and plan.rhs_offset == 12


@pytest.mark.parametrize("stride, dilation, padding", [(1, 1, 1), (2, 1, 1), (1, 2, 1),
                                                       (2, 1, 2), (1, 2, 3)])
def test_padded_conv2d_reads_a_zero_padded_input(stride, dilation, padding):
    x, w = tg.placeholder((2, 3, 8, 9), name="x"), tg.placeholder((4, 3, 3, 3), name="w")
    t = tg.nn.conv2d(x, w, padding=padding, stride=stride, dilation=dilation)
    c = detect_contraction(t)
    assert c is not None and c.guard is not None
    assert set(c.m_axes) == {"nn", "yy", "xx"} and c.n_axes == ("ff",)
    assert set(c.k_axes) == {"rc", "ry", "rx"}
    assert c.a.padding[:2] == ((0, 0), (0, 0)) and c.a.padding[2][0] == padding
    assert c.a.strides["xx"] == stride and c.a.strides["yy"] == stride * c.a.padded_shape[3]
    c, plan = check_plan(t, feeds(x, w, seed=stride), 1e-4)
    assert plan.rhs is x and plan.rhs_padding == c.a.padding and not plan.lhs_padding


@pytest.mark.parametrize("stride, dilation, padding", [(2, 1, 1), (3, 1, 1), (2, 2, 2),
                                                       (2, 1, 0), (3, 2, 2)])
def test_strided_weight_gradient_sums_over_every_output_position(stride, dilation, padding):
    """Zero elimination shifts a strided weight gradient's output positions by a division
    of the window offset (``yy_s + (-ry) // 2 + 1``, the bounds of ``yy_s`` depending on
    it); undone, the sum runs over every output position against the zero-padded input."""
    x, w = tg.placeholder((2, 3, 13, 11), name="x"), tg.placeholder((4, 3, 3, 3), name="w")
    y = tg.nn.conv2d(x, w, padding=padding, stride=stride, dilation=dilation)
    head = tg.placeholder(y.shape, name="head")
    dw = tg.differentiate(y, [w], head=head).result[0]
    c = detect_contraction(dw)
    assert c is not None
    assert c.n_axes == ("i0",) or c.m_axes == ("i0",)
    k = {name: c.extents[name] for name in c.k_axes}
    assert sorted(k.values()) == sorted((2,) + y.shape[2:])
    check_plan(dw, feeds(x, head, seed=stride), 1e-4)


def test_guards_other_than_bounds_checks_are_kept_and_refused():
    a, b = tg.placeholder((6, 6), name="a"), tg.placeholder((6, 5), name="b")
    k = tg.reduce_axis((0, 6), name="k")
    # a triangular product: the guard is no bounds check
    t = tg.compute((6, 5), lambda i, j: tg.sum(a[i, k] * b[k, j], axis=k, where=k <= i))
    c = detect_contraction(t)
    assert c is not None and c.guard is not None and not c.a.padding and not c.b.padding
    assert gemm_plan(c) is None
    # a bounds check of one side only, while the read leaves the tensor on the other
    k2 = tg.reduce_axis((0, 7), name="k2")
    t2 = tg.compute((6, 5), lambda i, j: tg.sum(a[i, k2 - 1] * b[k2 - 1, j], axis=k2,
                                                where=k2 - 1 >= 0))
    assert detect_contraction(t2) is None or gemm_plan(detect_contraction(t2)) is None


@pytest.mark.parametrize("stride, dilation, groups", [(1, 1, 1), (2, 1, 1), (1, 2, 1),
                                                      (2, 2, 1), (1, 1, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unpadded_conv2d_runs_as_a_gemm_with_offset_tables(stride, dilation, groups, dtype):
    x = tg.placeholder((2, 4, 11, 10), name="x", dtype=dtype)
    w = tg.placeholder((6, 4 // groups, 3, 3), name="w", dtype=dtype)
    t = tg.nn.conv2d(x, w, stride=stride, dilation=dilation, groups=groups)
    c = detect_contraction(t)
    if groups > 1:
        # a group's channels are read at ff // 3 * 2 + rc: the output channel is read by
        # both operands (a batch axis of the output's), with ff // 3 not affine
        assert c is None
        return
    c, plan = check_plan(t, feeds(x, w, seed=stride), 1e-4 if dtype == "float32" else 1e-12)
    # the output's stride-1 axis xx is read by x: x is the packed operand, w broadcast;
    # the output's rows and columns are one run of C's columns, read from x by a table
    assert plan.swapped and plan.lhs is w and plan.spec.n == t.shape[2] * t.shape[3]
    assert plan.spec.k_offsets is not None and plan.spec.n_offsets is not None
    assert plan.spec.batch == t.shape[0] and plan.spec.batch_offsets is None


@pytest.mark.parametrize("make", [
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: a[i, j] * b[i, j]),
                 id="elementwise"),
    pytest.param(lambda a, b, v, I: tg.compute((4,), lambda i: tg.sum(
        a[i, K()] * 2.0, axis=_k)), id="one-read"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.max(
        a[i, K()] * b[K(), j], axis=_k)), id="max-reducer"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] + b[K(), j], axis=_k)), id="sum-of-sum"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] * b[K(), j] * v[j], axis=_k)), id="three-reads"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[I[i], K()] * b[K(), j], axis=_k)), id="data-dependent-index"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K() // 2] * b[K(), j], axis=_k)), id="floordiv-index"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] * v[j], axis=_k)), id="k-read-by-one-operand"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4, 2), lambda i, j, z: tg.sum(
        a[i, K()] * b[K(), j], axis=_k)), id="output-axis-read-by-neither"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] * b[K() + 1, j], axis=_k)), id="read-out-of-bounds"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] * b[K(), j], axis=_k, init=1.0)), id="init"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] * b[K(), j], axis=_k) * tg.sum(a[i, K2()], axis=_k2)),
        id="two-reductions"),
    pytest.param(lambda a, b, v, I: tg.compute((4, 4), lambda i, j: tg.sum(
        a[i, K()] * b[K(), j], axis=_k) + a[i, K2()]), id="reduce-axis-in-epilogue"),
])
def test_non_contractions_are_refused(make):
    a, b = tg.placeholder((4, 4), name="a"), tg.placeholder((4, 4), name="b")
    v, I = tg.placeholder((4,), name="v"), tg.placeholder((4,), dtype="int64", name="I")
    try:
        t = make(a, b, v, I)
    except tg.TegradError:
        return  # the program itself is invalid; nothing to detect
    assert detect_contraction(t) is None
    assert detect_contraction(a) is None


_k = tg.reduce_axis((0, 4), name="k")
_k2 = tg.reduce_axis((0, 4), name="k2")


def K():
    return _k


def K2():
    return _k2


ROLES = ("m", "n", "batch", "k")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_einsum_stages(data):
    """Random axis roles, extents and orders of the dimensions: the detected roles are
    the drawn ones, a plan is made unless the output's stride-1 axis is a batch axis,
    and it agrees with tg.evaluate."""
    dtype = data.draw(st.sampled_from(["float32", "float64"]))
    n_axes = data.draw(st.integers(2, 5))
    roles = data.draw(st.lists(st.sampled_from(ROLES), min_size=n_axes, max_size=n_axes)
                      .filter(lambda r: "k" in r and r.count("k") < len(r)))
    names = [f"v{i}" for i in range(n_axes)]
    extents = {v: data.draw(st.integers(1, 9)) for v in names}
    role = dict(zip(names, roles))
    a_dims = data.draw(st.permutations([v for v in names if role[v] in ("m", "batch", "k")]))
    b_dims = data.draw(st.permutations([v for v in names if role[v] in ("n", "batch", "k")]))
    out_dims = data.draw(st.permutations([v for v in names if role[v] != "k"]))
    A = tg.placeholder(tuple(extents[v] for v in a_dims), dtype=dtype, name="A")
    B = tg.placeholder(tuple(extents[v] for v in b_dims), dtype=dtype, name="B")
    red = {v: tg.reduce_axis((0, extents[v]), name=v) for v in names if role[v] == "k"}

    def body(*ax):
        env = dict(zip(out_dims, ax), **red)
        return tg.sum(A[tuple(env[v] for v in a_dims)] * B[tuple(env[v] for v in b_dims)],
                      axis=list(red.values()))

    t = tg.compute(tuple(extents[v] for v in out_dims), body, axis_names=out_dims, name="t")
    c = detect_contraction(t)
    assert c is not None
    for r, axes in (("m", c.m_axes), ("n", c.n_axes), ("batch", c.batch_axes), ("k", c.k_axes)):
        assert set(axes) == {v for v in names if role[v] == r}
    assert c.a.strides == {v: s for v, s in zip(a_dims, row_major_strides(A.shape))
                           if extents[v] >= 1}
    plan = gemm_plan(c)
    innermost_is_batch = out_dims and role[out_dims[-1]] == "batch"
    assert (plan is None) == bool(innermost_is_batch)
    event(f"offset tables: {plan is not None and plan.spec.k_offsets is not None}")
    if plan is not None:
        feed = feeds(A, B, seed=n_axes)
        got = run_plan(plan, feed, threads=data.draw(st.sampled_from([1, 2])))
        tol = 1e-4 if dtype == "float32" else 1e-11
        np.testing.assert_allclose(got.reshape(t.shape), tg.evaluate(t, feed), rtol=tol,
                                   atol=tol)
