"""tegrad.torch.operator: tensors in and out, autograd, checks, torch.compile."""
import importlib
import sys

import numpy as np
import pytest
import torch

import tegrad as tg
import tegrad.torch as tgt


def tanh_scale(name, dtype="float64", shape=(3, 4)):
    """y = tanh(x * w) and its row sums of squares s, as an operator of (x, w)."""
    x = tg.placeholder(shape, dtype=dtype, name="x")
    w = tg.placeholder(shape[-1:], dtype=dtype, name="w")
    y = tg.compute(shape, lambda i, j: tg.tanh(x[i, j] * w[j]), name="y")
    k = tg.reduce_axis((0, shape[-1]), name="k")
    s = tg.compute(shape[:1], lambda i: tg.sum(y[i, k] * y[i, k], axis=k), name="s")
    return tgt.operator([x, w], [y, s], name=name)


def reference(x, w):
    y = torch.tanh(x * w)
    return y, (y * y).sum(dim=1)


def leaves(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, dtype=dtype, generator=g).requires_grad_() for s in shapes]


def test_values_and_gradients_match_pytorch():
    op = tanh_scale("t_values")
    x, w = leaves((3, 4), (4,))
    y, s = op(x, w)
    ry, rs = reference(x, w)
    torch.testing.assert_close(y, ry)
    torch.testing.assert_close(s, rs)
    gy = torch.randn(3, 4, dtype=torch.float64)
    got = torch.autograd.grad((y, s), (x, w), (gy, torch.ones(3, dtype=torch.float64)))
    want = torch.autograd.grad((ry, rs), (x, w), (gy, torch.ones(3, dtype=torch.float64)))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_second_derivatives_through_create_graph():
    op = tanh_scale("t_second")
    x, w = leaves((3, 4), (4,), seed=1)
    for f in (op, reference):
        y, s = f(x, w)
        (dx,) = torch.autograd.grad(s.sum() + y.sum(), x, create_graph=True)
        hvp = torch.autograd.grad((dx * dx).sum(), (x, w))
        if f is op:
            got = hvp
        else:
            for a, b in zip(got, hvp):
                torch.testing.assert_close(a, b)


def test_backward_operators_are_built_per_set_of_inputs_and_cached():
    op = tanh_scale("t_lazy")
    x, w = leaves((3, 4), (4,), seed=2)
    assert op._vjps == {}
    op(x, w.detach())[1].sum().backward()
    assert list(op._vjps) == [(True, False)]
    first = op.vjp((True, False))
    op(x, w)[1].sum().backward()
    op(x, w)[0].sum().backward()
    assert sorted(op._vjps) == [(True, False), (True, True)]
    assert op.vjp((True, False)) is first
    torch.testing.assert_close(x.grad, torch.autograd.grad(
        sum(t.sum() for t in [reference(x, w)[1]] * 2 + [reference(x, w)[0]]), x)[0])


def test_no_gradient_needed_runs_without_autograd():
    op = tanh_scale("t_nograd")
    x, w = leaves((3, 4), (4,), seed=3)
    with torch.no_grad():
        y, s = op(x, w)
    assert not y.requires_grad and not s.requires_grad and op._vjps == {}


def test_contiguous_cpu_tensors_are_read_in_place_others_are_copied():
    op = tanh_scale("t_inplace", dtype="float32")
    seen = []
    compiled = op.function

    def recording(*arrays):
        seen.append([a.ctypes.data for a in arrays])
        return compiled(*arrays)
    op.function = recording
    try:
        x = torch.randn(3, 4)
        w = torch.randn(8)[::2]  # a strided view: copied
        y, _ = op(x, w)
        assert seen[0][0] == x.data_ptr()
        torch.testing.assert_close(y, torch.tanh(x * w))
        xt = torch.randn(4, 3).t()  # a transpose: not contiguous
        y, _ = op(xt, w)
        torch.testing.assert_close(y, torch.tanh(xt * w))
    finally:
        op.function = compiled


def test_outputs_are_tensors_on_the_returned_arrays():
    op = tanh_scale("t_outputs", dtype="float32")
    y, s = op(torch.ones(3, 4), torch.ones(4))
    assert type(y) is torch.Tensor and y.dtype == torch.float32 and y.shape == (3, 4)
    y2, _ = op(torch.zeros(3, 4), torch.ones(4))
    # the earlier output is still referenced, so the compiled function did not reuse it
    assert y.data_ptr() != y2.data_ptr() and float(y[0, 0]) == pytest.approx(np.tanh(1.0))


def test_integer_inputs_and_outputs_get_no_gradient():
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    idx = tg.placeholder((2,), dtype="int32", name="idx")
    rows = tg.compute((2, 3), lambda i, j: x[idx[i], j] * 2.0, name="rows")
    count = tg.compute((), lambda: idx[0] + idx[1], name="count")
    op = tgt.operator([x, idx], [rows, count], name="t_ints")
    xs = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([3, 1], dtype=torch.int32)
    got, n = op(xs, ids)
    assert not n.requires_grad and int(n) == 4
    got.sum().backward()
    want = torch.zeros(4, 3, dtype=torch.float64)
    want[[3, 1]] = 2.0
    torch.testing.assert_close(xs.grad, want)
    assert list(op._vjps) == [(True, False)]
    with pytest.raises(tg.TegradError, match="'idx'.*int32"):
        op.vjp((True, True))


def test_arguments_are_checked_and_named():
    op = tanh_scale("t_checks", dtype="float32")
    with pytest.raises(tg.FeedError, match="takes 2 tensors"):
        op(torch.ones(3, 4))
    with pytest.raises(tg.DTypeError, match=r"'w'.*torch.float64.*\.to\(torch.float32\)"):
        op(torch.ones(3, 4), torch.ones(4, dtype=torch.float64))
    with pytest.raises(tg.ShapeError, match=r"'x'.*shape \(4, 3\)"):
        op(torch.ones(4, 3), torch.ones(4))
    with pytest.raises(tg.FeedError, match="'x'.*torch.Tensor, got ndarray"):
        op(np.ones((3, 4), np.float32), torch.ones(4))
    with pytest.raises(tg.TegradError, match="'x'.*meta"):
        op(torch.ones(3, 4, device="meta"), torch.ones(4, device="meta"))


def test_operator_arguments_are_checked():
    x = tg.placeholder((2,), name="x")
    y = tg.compute((2,), lambda i: x[i] + 1.0, name="y")
    with pytest.raises(tg.TegradError, match="name must be an identifier"):
        tgt.operator([x], [y], name="two words")
    with pytest.raises(tg.TegradError, match="inputs must be placeholders"):
        tgt.operator([y], [y], name="t_bad_input")
    with pytest.raises(tg.TegradError, match="inputs is empty"):
        tgt.operator([], [y], name="t_no_input")
    with pytest.raises(tg.TegradError, match="twice"):
        tgt.operator([x], [y, y], name="t_twice")
    with pytest.raises(tg.TegradError, match="threads"):
        tgt.operator([x], [y], name="t_threads", threads=0)


def test_a_name_is_registered_once():
    def program(scale):
        x = tg.placeholder((2,), name="x")
        return [x], [tg.compute((2,), lambda i: x[i] * scale, name="y")]
    first = tgt.operator(*program(2.0), name="t_once")
    assert tgt.operator(*program(2.0), name="t_once") is first
    with pytest.raises(tg.TegradError, match="'t_once' is taken"):
        tgt.operator(*program(3.0), name="t_once")
    assert torch.ops.tegrad.t_once(torch.ones(2)).tolist() == [2.0, 2.0]


def test_torch_compile_keeps_one_opaque_operator():
    op = tanh_scale("t_compile")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)

    def loss(x, w):
        y, s = op(x, w)
        return (y.sin().sum() + s.sum()) * 2.0

    compiled = torch.compile(loss, fullgraph=True, backend=backend)
    x, w = leaves((3, 4), (4,), seed=4)
    got = compiled(x, w)
    (gx, gw) = torch.autograd.grad(got, (x, w))
    want = loss(x, w)
    torch.testing.assert_close(got, want)
    for a, b in zip((gx, gw), torch.autograd.grad(want, (x, w))):
        torch.testing.assert_close(a, b)
    (gm,) = graphs
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls.count(torch.ops.tegrad.t_compile.default) == 1
    assert not any("tanh" in str(c) for c in calls)


def test_importing_without_torch_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "tegrad.torch")
    with pytest.raises(tg.TegradError, match=r'pip install "tegrad\[torch\]"') as info:
        importlib.import_module("tegrad.torch")
    assert isinstance(info.value, ImportError)
