"""tegrad.torch's pointer path: ordinary tensors are read in place through the kernel's
entry on data pointers (Executable.run_pointers) into outputs PyTorch allocates; any
other tensor takes the checked path on numpy arrays, and no pointer is taken from
anything that could lie about it."""
import struct
import threading
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import tegrad as tg
import tegrad.torch as tgt
from tegrad.codegen.llvm.emit import RARE_BRANCH

DTYPES = ["float32", "float64", "int32", "int64"]


def scale_shift(shape, dtype, name):
    """``y = x * w + 3`` (w along the last axis) and ``s``, y's sums over the last axis."""
    x = tg.placeholder(shape, dtype=dtype, name="x")
    w = tg.placeholder(shape[-1:], dtype=dtype, name="w")
    y = tg.compute(shape, lambda *i: x[i] * w[i[-1]] + 3, name="y")
    k = tg.reduce_axis((0, shape[-1]), name="k")
    s = tg.compute(shape[:-1], lambda *i: tg.sum(y[(*i, k)], axis=k), name="s")
    return tgt.operator([x, w], [y, s], name=name)


def spy(op):
    """Record, per call, whether the operator took the pointer path."""
    taken = []
    read = op._in_place

    def recording(tensors, grad):
        outs = read(tensors, grad)
        taken.append(outs is not None)
        return outs
    op._in_place = recording
    return taken


def draw(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    if dtype.startswith("float"):
        return torch.randn(shape, generator=g, dtype=torch_dtype)
    return torch.randint(-50, 50, shape, generator=g, dtype=torch_dtype)


def as_bytes(t):
    return t.contiguous().numpy().tobytes()


@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_the_pointer_path_gives_bitwise_the_numpy_paths_outputs(shape, dtype, seed):
    op = scale_shift(shape, dtype, f"inplace_{dtype}_{'x'.join(map(str, shape))}")
    x, w = draw(shape, dtype, seed), draw(shape[-1:], dtype, seed + 1)
    taken = spy(op)
    with torch.no_grad():
        y, s = op(x, w)
    assert taken == [True]
    want = op.function(x.numpy(), w.numpy())  # the compiled function's checked path
    assert as_bytes(y) == want[0].tobytes() and as_bytes(s) == want[1].tobytes()
    assert y.dtype == x.dtype and tuple(y.shape) == shape and tuple(s.shape) == shape[:-1]
    oracle = tg.evaluate(list(op.function.outputs),
                         dict(zip(op.function.inputs, (x.numpy(), w.numpy()))))
    np.testing.assert_allclose(y.numpy(), oracle[0], rtol=1e-6, atol=1e-5)
    # the outputs are new tensors of their own, not the inputs' memory
    assert y.data_ptr() not in (x.data_ptr(), w.data_ptr())


def twice(name, dtype="float32", n=3):
    x = tg.placeholder((n,), dtype=dtype, name="x")
    return tgt.operator([x], [tg.compute((n,), lambda i: x[i] * 2.0, name="y")], name=name)


class Liar(torch.Tensor):
    """A tensor subclass whose data pointer is wrong."""

    def data_ptr(self):
        return 8


def misaligned():
    buffer = bytearray(np.arange(1, 4, dtype=np.float32).tobytes().rjust(13, b"\0"))
    return torch.frombuffer(buffer, dtype=torch.float32, offset=1, count=3)


ONE_TWO_THREE = [1.0, 2.0, 3.0]
# (make the argument, its values, whether the pointer path reads it)
ARGUMENTS = {
    "plain": (lambda: torch.tensor(ONE_TWO_THREE), ONE_TWO_THREE, True),
    "contiguous slice": (lambda: torch.arange(5.0)[2:], [2.0, 3.0, 4.0], True),
    "negated view": (lambda: torch._neg_view(torch.tensor(ONE_TWO_THREE)),
                     [-1.0, -2.0, -3.0], False),
    "strided": (lambda: torch.arange(6.0)[::2], [0.0, 2.0, 4.0], False),
    "expanded": (lambda: torch.tensor([5.0]).expand(3), [5.0, 5.0, 5.0], False),
    "misaligned": (misaligned, ONE_TWO_THREE, False),
    "lying subclass": (lambda: torch.tensor(ONE_TWO_THREE).as_subclass(Liar),
                       ONE_TWO_THREE, False),
    "parameter": (lambda: torch.nn.Parameter(torch.tensor(ONE_TWO_THREE), False),
                  ONE_TWO_THREE, False),
}


@pytest.mark.parametrize("kind", ARGUMENTS)
def test_only_ordinary_tensors_are_read_in_place(kind):
    op = twice("inplace_twice")
    make, values, in_place = ARGUMENTS[kind]
    taken = spy(op)
    with torch.no_grad():
        got = op(make())
    assert got.tolist() == [2.0 * v for v in values]
    # the spy sees the call, and the registered operator's implementation for a subclass
    assert taken[0] == in_place and not any(taken[1:])


def test_inputs_needing_a_gradient_are_read_in_place_by_the_autograd_function():
    op = twice("inplace_grad", dtype="float64")
    x = torch.tensor(ONE_TWO_THREE, dtype=torch.float64, requires_grad=True)
    taken = spy(op)
    y = op(x)
    # the eager call refuses x (it needs a gradient); the autograd function reads it
    assert taken == [False, True]
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    with torch.no_grad():
        op(x)
    assert taken[-1] is True


def test_wrong_tensors_are_refused_by_the_checked_path_naming_them():
    op = twice("inplace_refused")
    taken = spy(op)
    with pytest.raises(tg.ShapeError, match=r"'x'.*shape \(4,\)"):
        op(torch.ones(4))
    with pytest.raises(tg.DTypeError, match=r"'x'.*torch.float64"):
        op(torch.ones(3, dtype=torch.float64))
    with pytest.raises(tg.TegradError, match="'x'.*meta"):
        op(torch.ones(3, device="meta"))
    assert not any(taken)


def test_a_function_mode_is_never_asked_for_a_pointer():
    class LyingMode(torch.overrides.TorchFunctionMode):
        """Says every tensor's data starts at address 8."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.data_ptr:
                return 8
            return func(*args, **(kwargs or {}))
    op = twice("inplace_mode")
    taken = spy(op)
    with LyingMode():
        got = op(torch.tensor(ONE_TWO_THREE))
    assert got.tolist() == [2.0, 4.0, 6.0] and taken == []


def test_replacing_the_function_sends_calls_through_it_on_arrays():
    op = twice("inplace_replaced")
    compiled, calls = op.function, []
    op.function = lambda *arrays: calls.append(arrays) or compiled(*arrays)
    try:
        assert op._in_place is None
        assert op(torch.tensor(ONE_TWO_THREE)).tolist() == [2.0, 4.0, 6.0]
        assert len(calls) == 1 and isinstance(calls[0][0], np.ndarray)
    finally:
        op.function = compiled
    assert op._in_place is not None


def test_the_pointer_entry_checks_only_the_count_and_that_pointers_are_ints():
    run = twice("inplace_entry").function._run_pointers
    with pytest.raises(struct.error):
        run([1, 2, 3])  # three pointers for two arguments
    with pytest.raises(struct.error):
        run([1.5, 2])


def test_threads_calling_at_once_all_get_their_results():
    # layer norm: its mean and variance are temporaries, so calls share storage and lock
    x = tg.placeholder((4, 8), dtype="float64", name="x")
    k = tg.reduce_axis((0, 8), name="k")
    mean = tg.compute((4,), lambda i: tg.sum(x[i, k], axis=k) / 8.0, name="mean")
    k2 = tg.reduce_axis((0, 8), name="k2")
    var = tg.compute((4,), lambda i: tg.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]),
                                            axis=k2) / 8.0, name="var")
    y = tg.compute((4, 8), lambda i, j: (x[i, j] - mean[i]) / tg.sqrt(var[i] + 1e-5),
                   name="y")
    op = tgt.operator([x], [y], name="inplace_threads")
    assert op.function._executable.storage_arrays
    inputs = [draw((4, 8), "float64", seed) for seed in range(4)]
    wants = [torch.nn.functional.layer_norm(t, (8,), eps=1e-5) for t in inputs]
    failures = []

    def work(k):
        with torch.no_grad():
            for n in range(300):
                if n % 3 == 0:  # the numpy entry too, which takes the same lock
                    got = torch.from_numpy(op.function(inputs[k].numpy())[0].copy())
                else:
                    got = op(inputs[k])
                if not torch.allclose(got, wants[k], rtol=1e-9, atol=1e-9):
                    failures.append(k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_product_meeting_its_rare_branch_through_the_pointer_entry():
    # a padded convolution's exact loops (for operands that are not all finite) are
    # compiled when first needed; the pointer entry then runs the call again
    X = tg.placeholder((2, 3, 7, 6), dtype="float64", name="X")
    W = tg.placeholder((4, 3, 3, 3), dtype="float64", name="W")
    op = tgt.operator([X, W], [tg.nn.conv2d(X, W, padding=1)], name="inplace_rare")
    exe = op.function._executable
    assert any(kind == RARE_BRANCH for kind, _, _ in exe._running[1])
    x, w = draw((2, 3, 7, 6), "float64", 1), draw((4, 3, 3, 3), "float64", 2)
    bad = w.clone()
    bad[1, 2, 0, 0] = float("inf")
    taken = spy(op)
    with torch.no_grad():
        for arg in (w, bad, w):
            got = op(x, arg)
            feed = (x.numpy(), arg.numpy())
            assert as_bytes(got) == op.function(*feed)[0].tobytes()
            oracle = tg.evaluate(op.function.outputs[0], dict(zip(op.function.inputs, feed)))
            np.testing.assert_allclose(got.numpy(), oracle, rtol=1e-10, atol=1e-10,
                                       equal_nan=True)
    assert taken == [True, True, True]
    assert not any(kind == RARE_BRANCH for kind, _, _ in exe._running[1])


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(0, 30), min_size=0, max_size=4).map(tuple),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.int32, torch.bool]))
def test_output_templates_allocate_contiguous_tensors_of_the_outputs_kind(shape, dtype):
    out = types.SimpleNamespace(shape=shape)  # a placeholder's shape (zero sizes too)
    (template,) = tgt._output_templates([out], [dtype])
    new = torch.empty_like(template)
    assert new.shape == shape and new.dtype == dtype and new.is_contiguous()
    assert new.device.type == "cpu"
    # a large output's template holds one element, not the output's memory
    nbytes = int(np.prod(shape)) * dtype.itemsize
    assert template.untyped_storage().nbytes() == (
        nbytes if nbytes <= tgt.DENSE_TEMPLATE_BYTES else dtype.itemsize)
