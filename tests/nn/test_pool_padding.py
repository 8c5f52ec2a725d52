"""Per-side padding: max_pool2d and avg_pool2d with ``((top, bottom), (left, right))``
against PyTorch's pools of the explicitly padded input (``F.pad`` with ``-inf`` for max,
zeros for average; PyTorch's pools take only symmetric padding), values and gradients,
float32 and float64, evaluated and compiled; conv2d_transpose's per-side padding against
PyTorch's cropped output; and the one padding parser every layer shares."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.testing import check_vjp

TOL = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-5)}


def pooled_size(size, k, s, pads, d, ceil_mode):
    """PyTorch's pooling_output_shape_pad_lr (ATen's Pool.h)."""
    before, after = pads
    span = size + before + after - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + before:
        out -= 1
    return out


def torch_pool(kind, x, kernel, stride, pads, dilation, ceil_mode, count_include_pad):
    """PyTorch's pool of ``x`` padded explicitly (``F.pad``), unpadded."""
    (top, bottom), (left, right) = pads
    sides = (left, right, top, bottom)
    if kind == "max":
        return F.max_pool2d(F.pad(x, sides, value=-math.inf), kernel, stride, 0, dilation,
                            ceil_mode)
    y = F.avg_pool2d(F.pad(x, sides), kernel, stride, 0, ceil_mode)
    if count_include_pad:
        return y
    # the sum over the taps inside the input, divided by their number
    return y / F.avg_pool2d(F.pad(torch.ones_like(x), sides), kernel, stride, 0, ceil_mode)


def padding_form(pads, form):
    """``pads`` (per side) written as an int, per dimension or per side when it can be."""
    symmetric = all(b == a for b, a in pads)
    if form == "int" and symmetric and pads[0] == pads[1]:
        return pads[0][0]
    if form == "per dimension" and symmetric:
        return (pads[0][0], pads[1][0])
    return pads


@st.composite
def pool_cases(draw, kind):
    size = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    dilation = ((draw(st.integers(1, 2)), draw(st.integers(1, 2))) if kind == "max"
                else (1, 1))  # PyTorch has no dilated average pooling
    pads = tuple((draw(st.integers(0, dl * (k - 1))), draw(st.integers(0, dl * (k - 1))))
                 for k, dl in zip(kernel, dilation))
    return dict(shape=(draw(st.integers(1, 2)), draw(st.integers(1, 2))) + size, kernel=kernel,
                stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), pads=pads,
                dilation=dilation, ceil_mode=draw(st.booleans()),
                count_include_pad=draw(st.booleans()),
                form=draw(st.sampled_from(["int", "per dimension", "per side"])),
                seed=draw(st.integers(0, 2**16)))


def pool_case(kind, dtype, case, k):
    """The pool of ``case`` (number ``k``) and PyTorch's value and input gradient, or
    None after checking the error of a case with a window of padding only."""
    ks, s, pads, dil = case["kernel"], case["stride"], case["pads"], case["dilation"]
    shape, ceil_mode, include = case["shape"], case["ceil_mode"], case["count_include_pad"]
    out_hw = [pooled_size(shape[2 + d], ks[d], s[d], pads[d], dil[d], ceil_mode)
              for d in range(2)]
    rng = np.random.default_rng(case["seed"])
    v = rng.standard_normal(shape).astype(dtype)
    head_v = rng.standard_normal(shape[:2] + tuple(out_hw)).astype(dtype)
    xt = torch.tensor(v, requires_grad=True)
    want = torch_pool(kind, xt, ks, s, pads, dil, ceil_mode, include)
    # PyTorch may make one window more with ceil_mode (starting in the after padding)
    assert all(0 <= want.shape[2 + d] - out_hw[d] <= int(ceil_mode) for d in range(2))
    want = want[:, :, :out_hw[0], :out_hw[1]]
    x = tg.placeholder(shape, dtype=dtype, name=f"x{k}")
    padding = padding_form(pads, case["form"])
    if kind == "max":
        def pool():
            return nn.max_pool2d(x, ks, s, padding, dil, ceil_mode)
    else:
        def pool():
            return nn.avg_pool2d(x, ks, s, padding, 1, ceil_mode, include)
    inputs = torch_pool("max", torch.ones(shape, dtype=torch.float64), ks, s, pads, dil,
                        ceil_mode, include)[:, :, :out_hw[0], :out_hw[1]]
    if (inputs < 1).any():
        # a window of padding only (max pooling's -inf, average pooling's 0 or 0/0)
        with pytest.raises(tg.TegradError, match="holds no input element, only padding"):
            pool()
        return None
    y = pool()
    assert y.shape == want.shape
    want.backward(torch.tensor(head_v))
    if dtype == "float64":
        assert check_vjp(y, [x], {x: v}, rng=rng) < 1e-6
    return x, y, v, head_v, want.detach().numpy(), xt.grad.numpy()


def check_pools(kind, dtype, cases):
    """Every case's value and input gradient, evaluated and compiled (in one program),
    against PyTorch's."""
    cases = [c for c in cases
             if all(c["dilation"][d] * (c["kernel"][d] - 1) + 1
                    <= c["shape"][2 + d] + sum(c["pads"][d]) for d in range(2))]
    made = [m for m in (pool_case(kind, dtype, c, k) for k, c in enumerate(cases)) if m]
    assume(made)
    inputs, outputs, feeds, wants = [], [], [], []
    for k, (x, y, v, head_v, want, want_grad) in enumerate(made):
        head = tg.placeholder(y.shape, dtype=dtype, name=f"head{k}")
        (grad,) = tg.differentiate(y, [x], head=head)
        inputs += [x, head]
        outputs += [y, grad]
        feeds += [v, head_v]
        wants += [want, want_grad]
    for got in (tg.evaluate(outputs, dict(zip(inputs, feeds))),
                tg.build(inputs, outputs, threads=1)(*feeds)):
        for g, w in zip(got, wants):
            assert g.dtype == np.dtype(dtype)
            np.testing.assert_allclose(g, w, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@settings(max_examples=3, deadline=None)
@given(cases=st.lists(pool_cases("max"), min_size=4, max_size=4))
def test_max_pool2d_per_side_padding_against_pytorch(dtype, cases):
    check_pools("max", dtype, cases)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@settings(max_examples=3, deadline=None)
@given(cases=st.lists(pool_cases("avg"), min_size=4, max_size=4))
def test_avg_pool2d_per_side_padding_against_pytorch(dtype, cases):
    check_pools("avg", dtype, cases)


def test_causal_max_pool_reads_no_later_element():
    # padding (k - 1, 0): output t pools x[t - k + 1 .. t]
    v = np.random.default_rng(5).standard_normal((1, 1, 1, 9))
    x = tg.placeholder(v.shape, dtype="float64", name="x")
    y = tg.evaluate(nn.max_pool2d(x, (1, 4), 1, ((0, 0), (3, 0))), {x: v})
    assert np.array_equal(y[0, 0, 0], [v[0, 0, 0, max(0, t - 3):t + 1].max() for t in range(9)])


@pytest.mark.parametrize("fn", [nn.max_pool2d, nn.avg_pool2d])
def test_padding_forms_are_one_program(fn):
    x = tg.placeholder((1, 2, 6, 5), dtype="float32", name="x")
    same = [fn(x, 3, 2, p) for p in (1, (1, 1), ((1, 1), (1, 1)), [[1, 1], (1, 1)])]
    assert len({tg.format(y) for y in same}) == 1
    assert tg.format(fn(x, 3, 2, ((2, 0), (1, 1)))) != tg.format(same[0])


BAD_PADDINGS = [
    (-1, "must be non-negative, got -1"),
    (((0, 1), (2, -3)), "must be non-negative, got -3"),
    ((1, 2, 3), "must be an int, 2 ints or 2 \\(before, after\\) pairs of ints, got \\(1, 2, 3\\)"),
    (((1, 2, 3), (0, 0)), "must be an int, 2 ints or 2 \\(before, after\\) pairs"),
    (((1, 2), 3), "must be an int, 2 ints or 2 \\(before, after\\) pairs"),
    ((1.5, 1), "must be an int, 2 ints"),
    ("same", "must be an int, 2 ints"),
    ((True, 1), "must be an int, 2 ints"),
]


@pytest.mark.parametrize("padding,message", BAD_PADDINGS)
@pytest.mark.parametrize("layer", ["max_pool2d", "avg_pool2d", "conv2d", "conv2d_transpose"])
def test_bad_padding_is_named_by_every_layer(layer, padding, message):
    x = tg.placeholder((1, 2, 6, 6), dtype="float32", name="x")
    w = tg.placeholder((2, 2, 3, 3), dtype="float32", name="w")
    call = {"max_pool2d": lambda: nn.max_pool2d(x, 3, padding=padding),
            "avg_pool2d": lambda: nn.avg_pool2d(x, 3, padding=padding),
            "conv2d": lambda: nn.conv2d(x, w, padding=padding),
            "conv2d_transpose": lambda: nn.conv2d_transpose(x, w, padding=padding)}[layer]
    with pytest.raises(tg.TegradError, match=f"^{layer}: padding {message}"):
        call()


@pytest.mark.parametrize("padding,message", [
    (-2, "must be non-negative, got -2"), ((1, 2, 3), "must be an int or a \\(left, right\\) "
                                                      "pair of ints, got \\(1, 2, 3\\)"),
    (((1, 2), (0, 0)), "must be an int or a \\(left, right\\) pair")])
def test_bad_padding_of_conv1d(padding, message):
    x = tg.placeholder((1, 2, 6), dtype="float32", name="x")
    w = tg.placeholder((2, 2, 3), dtype="float32", name="w")
    with pytest.raises(tg.TegradError, match=f"^conv1d: padding {message}"):
        nn.conv1d(x, w, padding=padding)


@st.composite
def transpose_cases(draw):
    size = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    extra = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    full = [(size[d] - 1) * stride[d] + dilation[d] * (kernel[d] - 1) + 1 for d in range(2)]
    # per side, leaving at least one row and column
    pads = []
    for d in range(2):
        before = draw(st.integers(0, full[d] + extra[d] - 1))
        pads.append((before, draw(st.integers(0, full[d] + extra[d] - 1 - before))))
    return dict(size=size, kernel=kernel, stride=stride, dilation=dilation, extra=extra,
                pads=tuple(pads), seed=draw(st.integers(0, 2**16)))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@settings(max_examples=3, deadline=None)
@given(cases=st.lists(transpose_cases(), min_size=3, max_size=3))
def test_conv2d_transpose_per_side_padding_against_pytorch(dtype, cases):
    # PyTorch crops both sides alike: its uncropped output, cropped per side here
    inputs, outputs, feeds, wants = [], [], [], []
    for k, c in enumerate(cases):
        (top, bottom), (left, right) = pads = c["pads"]
        rng = np.random.default_rng(c["seed"])
        v = rng.standard_normal((1, 2) + c["size"]).astype(dtype)
        wv = rng.standard_normal((2, 3) + c["kernel"]).astype(dtype)
        xt, wt = torch.tensor(v, requires_grad=True), torch.tensor(wv, requires_grad=True)
        uncropped = F.conv_transpose2d(xt, wt, stride=c["stride"], dilation=c["dilation"])
        # output_padding adds rows and columns past the full output (zeros there)
        uncropped = F.pad(uncropped, (0, c["extra"][1], 0, c["extra"][0]))
        want = uncropped[:, :, top:uncropped.shape[2] - bottom, left:uncropped.shape[3] - right]
        head_v = rng.standard_normal(tuple(want.shape)).astype(dtype)
        want.backward(torch.tensor(head_v))
        x = tg.placeholder(v.shape, dtype=dtype, name=f"x{k}")
        w = tg.placeholder(wv.shape, dtype=dtype, name=f"w{k}")
        y = nn.conv2d_transpose(x, w, c["stride"], pads, c["extra"], c["dilation"])
        assert y.shape == tuple(want.shape)
        head = tg.placeholder(y.shape, dtype=dtype, name=f"head{k}")
        inputs += [x, w, head]
        outputs += [y] + list(tg.differentiate(y, [x, w], head=head))
        feeds += [v, wv, head_v]
        wants += [want.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()]
    for got in (tg.evaluate(outputs, dict(zip(inputs, feeds))),
                tg.build(inputs, outputs, threads=1)(*feeds)):
        for g, want_v in zip(got, wants):
            np.testing.assert_allclose(g, want_v, **TOL[dtype])


@settings(max_examples=20, deadline=None)
@given(size=st.tuples(st.integers(3, 7), st.integers(3, 7)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       pads=st.tuples(st.tuples(st.integers(0, 2), st.integers(0, 2)),
                      st.tuples(st.integers(0, 2), st.integers(0, 2))),
       seed=st.integers(0, 2**16))
def test_conv2d_transpose_is_the_adjoint_of_conv2d_per_side(size, stride, pads, seed):
    rng = np.random.default_rng(seed)
    x = tg.placeholder((1, 2) + size, dtype="float64", name="x")
    w = tg.placeholder((3, 2, 3, 3), dtype="float64", name="w")
    y = nn.conv2d(x, w, stride=stride, padding=pads)
    g = tg.placeholder(y.shape, dtype="float64", name="g")
    # the rows and columns conv2d's last window leaves unread
    extra = tuple((size[d] + sum(pads[d]) - 3) % stride[d] for d in range(2))
    xt = nn.conv2d_transpose(g, w, stride=stride, padding=pads, output_padding=extra)
    assert xt.shape == x.shape
    v, wv, gv = (rng.standard_normal(t.shape) for t in (x, w, g))
    yv, xtv = tg.evaluate([y, xt], {x: v, w: wv, g: gv})
    assert np.isclose(np.sum(yv * gv), np.sum(v * xtv))
