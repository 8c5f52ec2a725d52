"""Contractions compiled by tg.build run on the gemm kernel: results against tg.evaluate,
thread-count determinism, the loop-IR statement (printer, mapper, interpreter)."""

import concurrent.futures

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.expr import select
from tegrad.codegen.loops.interpret import run as interpret
from tegrad.codegen.loops.mapper import StmtMapper, walk_stmts
from tegrad.codegen.llvm.emit import RARE_BRANCH, emit_kernel
from tegrad.codegen.loops.nodes import If, MatrixProduct, Store
from tegrad.codegen.lower.product_plans import MIN_PRODUCT_OUTPUTS
from tegrad.codegen.lower import contraction as lower_contraction
from tegrad.codegen.lower.program import lower_program

from support.compare import check_build, feed_of


def products(f):
    return [s for s in walk_stmts(f.kernel.body) if type(s) is MatrixProduct]


@st.composite
def contractions(draw):
    """A random batched product with transposed/strided operands and maybe an epilogue."""
    dtype = draw(st.sampled_from(["float32", "float64"]))
    p, m, n, k = (draw(st.integers(1, hi)) for hi in (3, 14, 37, 20))
    a_t, b_t = draw(st.booleans()), draw(st.booleans())
    a_step = draw(st.sampled_from([1, 2]))
    epilogue = draw(st.sampled_from([None, "bias", "relu"]))
    a_shape = (p, k * a_step, m) if a_t else (p, m, k * a_step)
    A = tg.placeholder(a_shape, dtype=dtype, name="A")
    B = tg.placeholder((p, n, k) if b_t else (p, k, n), dtype=dtype, name="B")
    bias = tg.placeholder((n,), dtype=dtype, name="bias")
    r = tg.reduce_axis((0, k), name="r")

    def body(q, i, j):
        a = A[q, r * a_step, i] if a_t else A[q, i, r * a_step]
        b = B[q, j, r] if b_t else B[q, r, j]
        acc = tg.sum(a * b, axis=r)
        if epilogue == "bias":
            return acc + bias[j]
        if epilogue == "relu":
            return select(acc > 0, acc, acc * 0.5)  # reads the reduced value twice
        return acc
    C = tg.compute((p, m, n), body, name="C")
    inputs = [A, B] + ([bias] if epilogue == "bias" else [])
    return inputs, C, dtype


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions(), st.integers(0, 2 ** 16))
def test_random_contractions_match_evaluate(case, seed):
    inputs, C, dtype = case
    f = check_build(inputs, [C], feed_of(inputs, seed), 1e-4 if dtype == "float32" else 1e-10)
    p, m, n = C.shape
    # a product of fewer outputs per call than MIN_PRODUCT_OUTPUTS, or of one row or
    # column per call, runs as loops (batches merge into the rows when their strides allow)
    assert len(products(f)) <= 1 and bool(products(f)) == ("gemm(" in f.loops)
    if m * n >= MIN_PRODUCT_OUTPUTS and m > 1 and n > 1:
        assert len(products(f)) == 1
    if p * m * n < MIN_PRODUCT_OUTPUTS:
        assert not products(f)
    assert all(s.spec.m * s.spec.n >= MIN_PRODUCT_OUTPUTS and min(s.spec.m, s.spec.n) > 1
               for s in products(f))


def test_dense_forward_and_gradients_run_on_gemm():
    x = tg.placeholder((37, 29), name="x")
    w = tg.placeholder((13, 29), name="w")
    b = tg.placeholder((13,), name="b")
    y = tg.nn.dense(x, w, b)
    H = tg.placeholder(y.shape, name="H")
    g = tg.differentiate(y, [x, w, b], head=H)
    f = check_build([x, w, b, H], [y, g], feed_of([x, w, b, H]), 1e-4)
    assert len(products(f)) == 3  # dense, dx, dw (db is a plain sum)
    assert "dense = gemm(x, w;" in f.loops


def test_batched_matmul_float64():
    a = tg.placeholder((3, 5, 7), dtype="float64", name="a")
    b = tg.placeholder((3, 7, 9), dtype="float64", name="b")
    k = tg.reduce_axis((0, 7), name="k")
    c = tg.compute((3, 5, 9), lambda p, i, j: tg.sum(a[p, i, k] * b[p, k, j], axis=k), name="c")
    f = check_build([a, b], [c], feed_of([a, b]), 1e-12)
    assert len(products(f)) == 1


CONVS = [  # stride, padding, dilation, groups
    (1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (1, 0, 1, 1), (2, 0, 2, 1), (1, 1, 1, 2),
    (2, 1, 1, 2)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stride,padding,dilation,groups", CONVS)
def test_conv2d_forward_and_both_gradients(stride, padding, dilation, groups, dtype):
    X = tg.placeholder((2, 4, 9, 8), dtype=dtype, name="X")
    W = tg.placeholder((6, 4 // groups, 3, 3), dtype=dtype, name="W")
    Y = tg.nn.conv2d(X, W, stride=stride, padding=padding, dilation=dilation, groups=groups)
    HY = tg.placeholder(Y.shape, dtype=dtype, name="HY")
    G = tg.differentiate(Y, [X, W], head=HY)
    f = check_build([X, W, HY], [Y, G], feed_of([X, W, HY]),
                    1e-4 if dtype == "float32" else 1e-10)
    on_gemm = {s.c.name.split("_r")[0] for s in products(f)}
    # the residue classes of the strided grouped data gradient have one row per call
    # here (two channels a group): loops
    assert on_gemm == {"conv2d", "dW"} | ({"dX"} if groups == 1 or stride == 1 else set())


@pytest.mark.parametrize("channels,groups,filters", [(6, 3, 9), (8, 4, 8)])
def test_grouped_conv2d_gradients_are_products(channels, groups, filters):
    # the data gradient reads the filters of the input channel's group, c // (C / groups):
    # the solver pins the group to that quotient, so each group is a product of its own
    X = tg.placeholder((2, channels, 7, 6), dtype="float64", name="X")
    W = tg.placeholder((filters, channels // groups, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, padding=1, groups=groups)
    HY = tg.placeholder(Y.shape, dtype="float64", name="HY")
    G = tg.differentiate(Y, [X, W], head=HY)
    f = check_build([X, W, HY], [Y, G], feed_of([X, W, HY]), 1e-10)
    assert {s.c.name.split("_r")[0] for s in products(f)} == {"conv2d", "dX", "dW"}


def test_depthwise_conv2d_runs_its_one_row_products_as_loops():
    # one filter row per channel (m == 1): a product would fill one row of the
    # micro-kernel's register block and pack the image for nine multiplications each
    X = tg.placeholder((2, 5, 9, 8), dtype="float64", name="X")
    W = tg.placeholder((5, 1, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, padding=1, groups=5)
    HY = tg.placeholder(Y.shape, dtype="float64", name="HY")
    G = tg.differentiate(Y, [X, W], head=HY)
    f = check_build([X, W, HY], [Y, G], feed_of([X, W, HY]), 1e-10)
    assert not products(f)
    assert "vector accumulators" in f.schedule  # the weight gradient's sum along rows


def test_global_average_pooling_runs_its_one_column_product_as_loops():
    # a sum over each image's pixels is a product with ones of one column per call
    X = tg.placeholder((3, 20, 6, 6), dtype="float64", name="X")
    Y = tg.nn.global_avg_pool2d(X)
    HY = tg.placeholder(Y.shape, dtype="float64", name="HY")
    G = tg.differentiate(Y, [X], head=HY)
    f = check_build([X, HY], [Y, G], feed_of([X, HY]), 1e-12)
    assert not products(f)


@pytest.mark.parametrize("stride,dilation", [(1, 1), (2, 1), (1, 2)])
def test_conv2d_gradients_for_a_head_of_ones(stride, dilation):
    # without a head, zero elimination leaves dX = sum(W[...]): a product with ones
    X = tg.placeholder((2, 3, 8, 8), dtype="float64", name="X")
    W = tg.placeholder((5, 3, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, stride=stride, padding=1, dilation=dilation)
    G = tg.differentiate(Y, [X, W])
    f = check_build([X, W], [Y, G], feed_of([X, W]), 1e-10)
    # dX is the same for every image, dW for every output channel: each computed once
    # (small: as loops), then copied
    assert {s.c.name for s in products(f)} == {"conv2d"}
    assert {"dX_once", "dW_once"} <= {t.name for t in f.kernel.temps}


@pytest.mark.parametrize("stride,dilation", [(2, 1), (1, 2)])
def test_conv2d_gradients_for_a_head_of_ones_computed_once_on_gemm(stride, dilation,
                                                                    monkeypatch):
    # however small, the stages computed once run on their products where they have one
    # (sums of one read times ones, per residue class: strided and dilated windows)
    monkeypatch.setattr(lower_contraction, "MIN_PRODUCT_ITERATIONS", 0)
    # (shapes of their own: tg.build caches kernels by program)
    X = tg.placeholder((2, 3, 9, 7), dtype="float64", name="X")
    W = tg.placeholder((4, 3, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, stride=stride, padding=1, dilation=dilation)
    G = tg.differentiate(Y, [X, W])
    f = check_build([X, W], [Y, G], feed_of([X, W]), 1e-10)
    names = {s.c.name.split("_r")[0] for s in products(f)}
    assert "conv2d" in names and names & {"dX_once", "dW_once"}
    assert "ones" in {t.name for t in f.kernel.temps}


def test_reduction_not_using_an_output_axis_is_computed_once():
    # out[i, j] = sum_k w[k, j] * 2 is the same for every i: a (3,) stage, then copied
    w = tg.placeholder((4, 3), dtype="float64", name="w")
    k = tg.reduce_axis((0, 4), name="k")
    t = tg.compute((5, 3), lambda i, j: tg.sum(w[k, j] * 2.0, axis=k), name="t")
    plan = lower_contraction.contraction_plan(t)
    assert isinstance(plan, lower_contraction.Broadcast)
    assert plan.stage.shape == (3,) and plan.kept == (1,) and plan.found is None
    f = check_build([w], [t], feed_of([w]), 1e-12)
    assert f.kernel.temps[0].shape == (3,)


@pytest.mark.parametrize("stride,dilation,head", [(1, 1, True), (2, 1, True), (1, 2, False)])
def test_padded_products_keep_the_evaluators_non_finite_values(stride, dilation, head):
    # zero padding times inf is NaN where the stage skips the term: the stage's loops
    # run instead of the product when an operand meeting padding is not all finite
    X = tg.placeholder((2, 3, 7, 6), dtype="float64", name="X")
    W = tg.placeholder((4, 3, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, stride=stride, padding=1, dilation=dilation)
    HY = tg.placeholder(Y.shape, dtype="float64", name="HY")
    inputs = [X, W, HY] if head else [X, W]
    outputs = [Y, tg.differentiate(Y, [X, W], head=HY if head else None)]
    f = tg.build(inputs, outputs)
    assert products(f)
    feed = dict(zip(inputs, feed_of(inputs)))
    for name, index, value in [("W", (1, 2, 0, 0), np.inf), ("X", (0, 1, 0, 0), np.nan),
                               ("X", (1, 0, 6, 5), -np.inf), ("HY", (0, 0, 0, 0), np.inf)]:
        arrays = {t: feed[t].copy() for t in inputs}
        target = [t for t in inputs if t.name == name]
        if not target:
            continue
        arrays[target[0]][index] = value
        got = f(*[arrays[t] for t in inputs])
        for g, want in zip(got, tg.evaluate(list(f.outputs), arrays)):
            np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10, equal_nan=True,
                                       err_msg=name)


def _padded_conv(name):
    X = tg.placeholder((2, 3, 7, 6), dtype="float64", name=f"{name}X")
    W = tg.placeholder((4, 3, 3, 3), dtype="float64", name=f"{name}W")
    Y = tg.nn.conv2d(X, W, padding=1)
    return [X, W], [Y, tg.differentiate(Y, [X, W])]


def test_the_exact_loops_of_a_padded_product_compile_when_first_needed():
    inputs, outputs = _padded_conv("rare")
    f = tg.build(inputs, outputs)
    exe = f._executable
    deferred = exe.emitted_ir
    assert any(kind == RARE_BRANCH for kind, _, _ in exe._running[1])
    finite = feed_of(inputs)
    bad = [a.copy() for a in finite]
    bad[1][1, 2, 0, 0] = np.inf
    # compiled when the first non-finite operand comes, and kept
    for arrays, still_deferred in ((finite, True), (bad, False), (finite, False)):
        got = f(*arrays)
        for g, want in zip(got, tg.evaluate(list(f.outputs), dict(zip(inputs, arrays)))):
            np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10, equal_nan=True)
        assert (exe.emitted_ir == deferred) == still_deferred
    assert not any(kind == RARE_BRANCH for kind, _, _ in exe._running[1])
    assert len(exe.emitted_ir) > len(deferred)


def test_threads_meeting_a_deferred_branch_at_once_all_get_the_exact_result():
    inputs, outputs = _padded_conv("rare_threads")
    f = tg.build(inputs, outputs)
    arrays = feed_of(inputs)
    arrays[0][0, 1, 0, 0] = np.nan
    want = tg.evaluate(list(f.outputs), dict(zip(inputs, arrays)))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: f(*arrays), range(8)))
    for got in results:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10, equal_nan=True)


def test_each_operand_is_checked_for_non_finite_values_once():
    # a stride-2 weight gradient is one product per residue class of the window, each
    # reading the output gradient next to padding: one count of its non-finite values
    X = tg.placeholder((2, 3, 9, 8), dtype="float64", name="X")
    W = tg.placeholder((4, 3, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, stride=2, padding=1)
    H = tg.placeholder(Y.shape, dtype="float64", name="H")
    f = tg.build([X, W, H], [tg.differentiate(Y, [X, W], head=H)])
    assert len(products(f)) > 2
    counts = {b for b in f.kernel.temps if "_nonfinite" in b.name}
    resets = [s.buffer for s in walk_stmts(f.kernel.body) if type(s) is Store
              and s.buffer in counts]
    assert counts and len(resets) == len(counts)  # each computed once
    checked = [s for s in walk_stmts(f.kernel.body) if type(s) is If and s.likely]
    assert len(checked) > len(counts)  # and read by several products


def test_an_emitted_module_holds_the_rare_branches_unless_deferred():
    inputs, outputs = _padded_conv("rare_emit")
    kernel = tg.build(inputs, outputs).kernel
    whole = emit_kernel(kernel)
    deferred = emit_kernel(kernel, defer_rare=True)
    assert not any(kind == RARE_BRANCH for kind, _, _ in whole.errors)
    assert any(kind == RARE_BRANCH for kind, _, _ in deferred.errors)
    assert len(str(whole.module)) > len(str(deferred.module))


def test_bounds_that_are_no_padding_stay_loops():
    # a triangular product: k <= i is no "read inside its tensor" condition
    a = tg.placeholder((6, 6), dtype="float64", name="a")
    b = tg.placeholder((6, 5), dtype="float64", name="b")

    def body(i, j):
        k = tg.reduce_axis((0, i + 1), name="k")
        return tg.sum(a[i, k] * b[k, j], axis=k)
    t = tg.compute((6, 5), body, name="tri")
    f = check_build([a, b], [t], feed_of([a, b]), 1e-12)
    assert not products(f)


def test_threads_give_bit_identical_results():
    x = tg.placeholder((70, 80), name="x")
    w = tg.placeholder((65, 80), name="w")
    y = tg.nn.dense(x, w)
    arrays = feed_of([x, w])
    one = tg.build([x, w], [y], threads=1)(*arrays)[0]
    two = tg.build([x, w], [y], threads=2)(*arrays)[0]
    assert np.array_equal(one, two)
    np.testing.assert_allclose(one, arrays[0] @ arrays[1].T, rtol=1e-4, atol=1e-4)


def test_interpreter_and_mappers_know_the_product():
    X = tg.placeholder((1, 2, 5, 5), dtype="float64", name="X")
    W = tg.placeholder((3, 2, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, padding=1)
    k = lower_program([X, W], [Y], contractions=True)
    assert StmtMapper()(k.body) is k.body
    arrays = feed_of([X, W])
    (out,), count = interpret(k, arrays)
    np.testing.assert_allclose(out, tg.evaluate(Y, dict(zip([X, W], arrays))), rtol=1e-12)
    plain = lower_program([X, W], [Y])
    assert not [s for s in walk_stmts(plain.body) if type(s) is MatrixProduct]
    assert count > 0


def test_product_checks_its_buffers():
    from tegrad.codegen.kernels.gemm import GemmSpec
    from tegrad.codegen.loops.nodes import Buffer
    A = Buffer("A", (2, 3), "float32", "input")
    B = Buffer("B", (3, 4), "float32", "input")
    C = Buffer("C", (2, 4), "float32", "output")
    spec = GemmSpec.dense("float32", 2, 4, 3)
    assert hash(MatrixProduct(spec, C, A, B)) == hash(MatrixProduct(spec, C, A, B))
    with pytest.raises(ValueError):
        MatrixProduct(spec, C, A, B, a_offset=1)
    with pytest.raises(ValueError):
        MatrixProduct(GemmSpec.dense("float64", 2, 4, 3), C, A, B)


def test_schedules_keep_stages_after_the_products_they_read():
    # a training step: the forward product and the gradient's own product of x and w
    # feed fused softmax loops, which must still run after both products
    x = tg.placeholder((64, 32), name="x")
    w = tg.placeholder((16, 32), name="w")
    b = tg.placeholder((16,), name="b")
    labels = tg.placeholder((64,), dtype="int64", name="labels")
    loss = tg.nn.softmax_cross_entropy(tg.nn.dense(x, w, b), labels)
    inputs = [x, w, b, labels]
    arrays = feed_of(inputs[:3]) + [np.random.default_rng(1).integers(0, 16, 64)]
    f = check_build(inputs, [loss, tg.differentiate(loss, [x, w, b])], arrays, 1e-4)
    assert products(f)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_narrow_output_columns_run_transposed(dtype):
    # out[f, c, r] = sum_k h[k, f, r] * x[k, c]: the stride-1 axis r has 2 values; the
    # product writes a temp with f as its columns, copied back
    h = tg.placeholder((9, 24, 2), dtype=dtype, name="h")
    x = tg.placeholder((9, 7), dtype=dtype, name="x")
    k = tg.reduce_axis((0, 9), name="k")
    t = tg.compute((24, 7, 2), lambda f, c, r: tg.sum(h[k, f, r] * x[k, c], axis=k),
                   name="t")
    f = check_build([h, x], [t], feed_of([h, x]), 1e-5 if dtype == "float32" else 1e-12)
    (product,) = products(f)
    assert product.c.shape == (7, 2, 24)


def test_a_product_with_wide_columns_is_not_transposed():
    # 10 filters over 16 images of 8x8 pixels: 64 columns per image already fill the
    # registers, so the output is written in place, not transposed and copied back
    X = tg.placeholder((16, 2, 10, 10), dtype="float64", name="X")
    W = tg.placeholder((10, 2, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W)
    f = check_build([X, W], [Y], feed_of([X, W]), 1e-10)
    (product,) = products(f)
    assert product.c.shape == Y.shape and product.spec.n == 64 and product.spec.batch == 16


@pytest.mark.parametrize("stride", [2, 3])
def test_strided_conv2d_weight_gradient_is_one_product(stride):
    """Zero elimination shifts the output positions of a strided weight gradient by a
    division of the window offset (``yy + (-ky) // 2 + 1``); seen unshifted, the sum
    runs over every output position against the zero-padded input: one product writing
    ``dW`` itself, no residue classes."""
    X = tg.placeholder((2, 3, 17, 16), dtype="float64", name="X")
    W = tg.placeholder((6, 3, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, stride=stride, padding=1)
    H = tg.placeholder(Y.shape, dtype="float64", name="H")
    dW = tg.differentiate(Y, [W], head=H)
    f = check_build([X, W, H], [dW], feed_of([X, W, H]), 1e-10)
    (product,) = products(f)
    assert product.c.name == dW.result[0].name and product.c.shape == W.shape


def test_strided_conv2d_data_gradient_keeps_its_residue_classes():
    """As one product the strided data gradient would sum over every output position
    for each input element (a weight padded to the image's size, mostly zeros): its
    residue classes cost less."""
    X = tg.placeholder((2, 3, 9, 8), dtype="float64", name="X")
    W = tg.placeholder((6, 3, 3, 3), dtype="float64", name="W")
    Y = tg.nn.conv2d(X, W, stride=2, padding=1)
    H = tg.placeholder(Y.shape, dtype="float64", name="H")
    dX = tg.differentiate(Y, [X], head=H)
    f = check_build([X, W, H], [dX], feed_of([X, W, H]), 1e-10)
    assert len(products(f)) == 4
    assert all(p.b.shape == W.shape or p.a.shape == W.shape for p in products(f))


@pytest.mark.parametrize("wanted", ["dx", "dw"])
@pytest.mark.parametrize("stride", [1, 2])
def test_one_gradient_alone_runs_on_gemm(wanted, stride):
    """A conv gradient built without the other (a first layer needs no ``dx``) reads
    the loss's elementwise gradient once, inside its reduction: that stage keeps its
    buffer so that the gradient stays a product of two reads."""
    x = tg.placeholder((2, 4, 9, 8), name="x")
    w = tg.placeholder((6, 4, 3, 3), name="w")
    head = tg.placeholder(tg.nn.conv2d(x, w, stride=stride, padding=1).shape, name="head")
    y = tg.nn.conv2d(x, w, stride=stride, padding=1)
    loss = tg.ops.sum(tg.ops.multiply(y, head))
    dx, dw = tg.differentiate(loss, [x, w]).optimized()
    out = dx if wanted == "dx" else dw
    f = check_build([x, w, head], [out], feed_of([x, w, head]), 1e-4)
    assert {s.c.name.split("_r")[0] for s in products(f)} == {out.name}


def test_micro_kernels_are_compiled_once_per_process_and_declared():
    """A JIT kernel declares the products' micro-kernels and packing routines (compiled
    once for the process); an exported module defines its own."""
    from tegrad.codegen.llvm.emit import emit_kernel
    A = tg.placeholder((40, 30), name="A")
    B = tg.placeholder((30, 50), name="B")
    k = tg.reduce_axis((0, 30), name="k")
    C = tg.compute((40, 50), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = check_build([A, B], [C], feed_of([A, B]), 1e-4)
    assert products(f)
    text = f._executable.emitted_ir
    assert 'declare void @"tegrad.gemm.micro' in text
    assert 'define internal void @"tegrad.gemm.micro' not in text
    own = str(emit_kernel(f.kernel).module)
    assert 'define internal void @"tegrad.gemm.micro' in own
