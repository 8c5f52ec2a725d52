"""layer_norm, rms_norm, gelu, silu, softplus, embedding, conv1d (and per-side padding),
scaled_dot_product_attention, multi_head_attention and the extended softmax_cross_entropy
against PyTorch: values and every gradient (a random output gradient), float32 and
float64, evaluated and compiled. Each layer's tiny case in the operator gradient table
(tests/conftest.py) is also compiled with its optimised gradient and checked there."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tegrad as tg
from tegrad import nn

TOL = {"float64": dict(rtol=1e-10, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-5)}
DTYPES = ["float64", "float32"]


def check(build, torch_fn, arrays, dtype, *, ints=None, compiled=False, threads=1, seed=0):
    """``build(*placeholders)`` against ``torch_fn(*tensors)``: the value and the gradient
    of every float input for a random head, with ``tg.evaluate`` (and ``tg.build``)."""
    rng = np.random.default_rng(seed)
    ints = ints or {}
    phs, feed, tensors, diff = [], {}, [], []
    for k, a in enumerate(arrays):
        if k in ints:
            t = tg.placeholder(a.shape, dtype=str(a.dtype), name=f"i{k}")
            phs.append(t)
            feed[t] = a
            tensors.append(torch.tensor(a, dtype=torch.int64 if a.dtype.kind == "i"
                                        else torch.bool))
            continue
        a = a.astype(dtype)
        t = tg.placeholder(a.shape, dtype=dtype, name=f"a{k}")
        phs.append(t)
        feed[t] = a
        diff.append(t)
        tensors.append(torch.tensor(a, requires_grad=True))
    out = build(*phs)
    head = tg.placeholder(out.shape, dtype=dtype, name="head")
    feed[head] = rng.standard_normal(out.shape).astype(dtype)
    grads = list(tg.differentiate(out, diff, head=head))
    want = torch_fn(*tensors)
    want.backward(torch.tensor(feed[head]))
    wants = [want.detach().numpy()] + [t.grad.numpy() for t in tensors if t.requires_grad]
    results = [tg.evaluate([out] + grads, feed)]
    if compiled:
        inputs = phs + [head]
        results.append(tg.build(inputs, [out] + grads, threads=threads)(
            *[feed[t] for t in inputs]))
    for got in results:
        for g, w in zip(got, wants):
            assert g.dtype == np.dtype(dtype)
            np.testing.assert_allclose(g, w, **TOL[dtype])


@pytest.fixture
def rng():
    return np.random.default_rng(31)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_and_rms_norm(rng, dtype):
    x, g, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    check(lambda x, g, b: nn.layer_norm(x, g, b, axis=1),
          lambda x, g, b: F.layer_norm(x, (4, 5), g, b), [x, g, b], dtype)
    check(lambda x: nn.layer_norm(x, eps=1e-3), lambda x: F.layer_norm(x, (5,), eps=1e-3),
          [x], dtype)
    check(lambda x, g: nn.rms_norm(x, g), lambda x, g: F.rms_norm(x, (5,), g, eps=1e-6),
          [x, g[0]], dtype, compiled=dtype == "float32")
    check(lambda x: nn.rms_norm(x, axis=-2, eps=1e-4),
          lambda x: F.rms_norm(x, (4, 5), eps=1e-4), [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations(rng, dtype):
    x = rng.uniform(-6, 6, size=(4, 7))
    x[0, :3] = [30.0, -30.0, 0.0]
    check(nn.gelu, F.gelu, [x], dtype)
    check(lambda x: nn.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"),
          [x], dtype)
    check(nn.silu, F.silu, [x], dtype)
    check(nn.softplus, F.softplus, [x], dtype)
    # beta x above the threshold is x itself; below it log1p(exp(beta x)) / beta
    check(lambda x: nn.softplus(x, beta=2, threshold=5),
          lambda x: F.softplus(x, beta=2, threshold=5), [x], dtype, compiled=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations_at_the_ends_of_the_float_range(dtype):
    """GELU (both forms) and SiLU of values near the largest float, and their gradients
    at large values (where tanh and the sigmoid round to 1), equal PyTorch's: no
    overflow of x * (1 + erf) and no leading digit lost in the gradient."""
    top = float(np.finfo(dtype).max)
    v = np.array([top * 0.9, -top * 0.9, top * 0.6, 1e3, 3e3, 8e5, 2e7, -2e7], dtype)
    x = tg.placeholder(v.shape, dtype=dtype, name="x")
    for ours, theirs in ((nn.gelu, F.gelu), (nn.silu, F.silu),
                         (lambda t: nn.gelu(t, approximate="tanh"),
                          lambda t: F.gelu(t, approximate="tanh"))):
        y = ours(x)
        (g,) = tg.differentiate(y, [x])
        t = torch.tensor(v, requires_grad=True)
        theirs(t).backward(torch.ones_like(t))
        with np.errstate(over="ignore", invalid="ignore"):
            got = tg.evaluate([y, g], {x: v})
            compiled = tg.build([x], [y, g], threads=1)(v)
        want = [theirs(torch.tensor(v)).numpy(), t.grad.numpy()]
        finite = np.abs(v) < 1e7  # (the gradient at the largest values: inf * 0 forms)
        for a, b in ((got[0], want[0]), (compiled[0], want[0])):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        for a in (got[1], compiled[1]):
            np.testing.assert_allclose(a[finite], want[1][finite], rtol=1e-6)


def test_embedding_scatter_add_gradient_on_two_threads(rng):
    table = rng.standard_normal((50, 64))
    ids = rng.integers(0, 50, size=(32, 40)).astype("int32")
    ids[:, :8] = 7  # many rows collide
    for threads in (1, 2):
        check(nn.embedding, lambda t, i: F.embedding(i, t), [table, ids], "float32",
              ints={1: None}, compiled=True, threads=threads)
    check(nn.embedding, lambda t, i: F.embedding(i, t), [table, ids[:3]], "float64",
          ints={1: None})


def test_embedding_errors():
    table = tg.placeholder((5, 2), dtype="float64", name="table")
    with pytest.raises(tg.DTypeError, match="embedding: ids 'f' has dtype float64"):
        nn.embedding(table, tg.placeholder((3,), dtype="float64", name="f"))
    with pytest.raises(tg.ShapeError, match="embedding: table 'v' must have 2 dim"):
        nn.embedding(tg.placeholder((5,), name="v"), tg.placeholder((3,), "int32", name="i"))
    ids = tg.placeholder((2,), dtype="int32", name="ids")
    with pytest.raises(tg.OutOfBoundsError):
        tg.evaluate(nn.embedding(table, ids), {table: np.zeros((5, 2)),
                                               ids: np.array([1, 5], "int32")})


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv1d(rng, dtype):
    x, w = rng.standard_normal((2, 4, 11)), rng.standard_normal((6, 2, 3))
    check(lambda x, w: nn.conv1d(x, w, stride=2, padding=1, dilation=2, groups=2),
          lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=2, groups=2),
          [x, w], dtype)
    # causal: (d(K-1), 0) padding on the left only, no padded copy
    check(lambda x, w: nn.conv1d(x, w, padding=(4, 0), dilation=2),
          lambda x, w: F.conv1d(F.pad(x, (4, 0)), w, dilation=2), [x, rng.standard_normal((3, 4, 3))], dtype, compiled=dtype == "float32")


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_per_side_padding(rng, dtype):
    x, w = rng.standard_normal((1, 2, 6, 7)), rng.standard_normal((3, 2, 3, 2))
    check(lambda x, w: nn.conv2d(x, w, padding=((2, 0), (1, 3)), stride=(2, 1)),
          lambda x, w: F.conv2d(F.pad(x, (1, 3, 2, 0)), w, stride=(2, 1)), [x, w], dtype)


def test_conv_padding_errors():
    x = tg.placeholder((1, 2, 5), dtype="float64", name="x")
    w = tg.placeholder((1, 2, 3), dtype="float64", name="w")
    with pytest.raises(tg.TegradError, match="conv1d: padding must be an int"):
        nn.conv1d(x, w, padding=(1, 2, 3))
    with pytest.raises(tg.TegradError, match="conv1d: padding must be non-negative"):
        nn.conv1d(x, w, padding=(-1, 0))
    with pytest.raises(tg.ShapeError, match=r"conv1d: the kernel of 'x' along length \(3, "
                                            r"dilated to 7\) is larger than the padded input \(5 \+ 1 \+ 0"):
        nn.conv1d(x, w, dilation=3, padding=(1, 0))
    x2 = tg.placeholder((1, 2, 5, 5), dtype="float64", name="x2")
    with pytest.raises(tg.TegradError, match=r"conv2d: padding must be .* got \(\(1, 2\), \(3,\)\)"):
        nn.conv2d(x2, tg.placeholder((1, 2, 3, 3), name="w2", dtype="float64"),
                  padding=((1, 2), (3,)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_dot_product_attention(rng, dtype):
    q, k, v = (rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 6, 4)),
               rng.standard_normal((2, 3, 6, 2)))
    check(nn.scaled_dot_product_attention, F.scaled_dot_product_attention, [q, k, v], dtype)
    qs = q[:, :, :5]
    check(lambda q, k, v: nn.scaled_dot_product_attention(q, k, v, causal=True, scale=0.7),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7),
          [qs, k[:, :, :5], v[:, :, :5]], dtype, compiled=dtype == "float32")
    keep = rng.uniform(size=(3, 1, 6)) > 0.4
    keep[..., 0] = True
    check(lambda q, k, v, m: nn.scaled_dot_product_attention(q, k, v, mask=m),
          lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          [q, k, v, keep], dtype, ints={3: None})
    add = rng.standard_normal((5, 6))
    check(lambda q, k, v, m: nn.scaled_dot_product_attention(q, k, v, mask=m),
          lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          [q, k, v, add], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_attention_rows_keeping_no_key_are_zero_as_pytorch(dtype, seed):
    """Rows whose mask keeps no key (all False, or all -inf added) give zeros and zero
    gradients, as PyTorch's; the other rows are unchanged. Evaluated and compiled."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 2, 5, 3)), rng.standard_normal((2, 2, 6, 3)),
               rng.standard_normal((2, 2, 6, 4)))
    keep = rng.uniform(size=(2, 5, 6)) > 0.5
    keep[:, rng.integers(0, 5)] = False  # a row keeping nothing, in every batch element
    keep[0, rng.integers(0, 5), :] = False
    check(lambda q, k, v, m: nn.scaled_dot_product_attention(q, k, v, mask=m),
          lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          [q, k, v, keep[:, None]], dtype, ints={3: None}, compiled=True)
    add = np.where(keep[0], rng.standard_normal((5, 6)), -np.inf)
    check(lambda q, k, v, m: nn.scaled_dot_product_attention(q, k, v, mask=m, causal=True),
          lambda q, k, v, m: F.scaled_dot_product_attention(
              q, k, v, attn_mask=m + torch.triu(torch.full((5, 6), -torch.inf), 1)),
          [q, k, v, add], dtype, compiled=True)


def test_attention_errors():
    q = tg.placeholder((2, 5, 4), dtype="float64", name="q")
    k = tg.placeholder((2, 6, 3), dtype="float64", name="k")
    with pytest.raises(tg.ShapeError, match="k 'k' has 3 features per key but q 'q' has 4"):
        nn.scaled_dot_product_attention(q, k, k)
    m = tg.placeholder((4, 6), dtype="bool", name="m")
    with pytest.raises(tg.ShapeError, match=r"mask 'm' of shape \(4, 6\) does not broadcast"):
        nn.scaled_dot_product_attention(q, q, q, mask=m)
    mi = tg.placeholder((5, 5), dtype="int32", name="mi")
    with pytest.raises(tg.DTypeError, match="mask 'mi' has dtype int32"):
        nn.scaled_dot_product_attention(q, q, q, mask=mi)


@pytest.mark.parametrize("dtype", DTYPES)
def test_multi_head_attention_against_pytorch(rng, dtype):
    N, T, S, E, H = 2, 4, 5, 6, 3
    arrays = [rng.standard_normal(s) for s in ((N, T, E), (N, S, E), (N, S, E), (E, E), (E, E),
                                               (E, E), (E, E), (E,), (E,), (E,), (E,))]

    def ours(q, k, v, wq, wk, wv, wo, bq, bk, bv, bo):
        return nn.multi_head_attention(q, k, v, wq, wk, wv, wo, num_heads=H, b_q=bq, b_k=bk,
                                       b_v=bv, b_o=bo)

    def theirs(q, k, v, wq, wk, wv, wo, bq, bk, bv, bo):
        out, _ = F.multi_head_attention_forward(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), E, H,
            torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv]), None, None, False, 0.0, wo, bo,
            need_weights=False)
        return out.transpose(0, 1)

    check(ours, theirs, arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_cross_entropy_like_pytorch(rng, dtype):
    logits = rng.standard_normal((4, 5, 3, 2)) * 3
    labels = rng.integers(0, 5, size=(4, 3, 2)).astype("int32")
    labels[0, 0, 0] = labels[2, 1, 1] = -100
    for reduction in ("mean", "sum", "none"):
        check(lambda x, y: nn.softmax_cross_entropy(x, y, ignore_index=-100,
                                                    label_smoothing=0.1, reduction=reduction),
              lambda x, y: F.cross_entropy(x, y, ignore_index=-100, label_smoothing=0.1,
                                           reduction=reduction),
              [logits, labels], dtype, ints={1: None},
              compiled=dtype == "float32" and reduction == "mean")
    flat = rng.integers(0, 5, size=(4,)).astype("int32")
    check(nn.softmax_cross_entropy, F.cross_entropy, [logits[:, :, 0, 0], flat], dtype,
          ints={1: None})


def test_softmax_cross_entropy_errors():
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    y = tg.placeholder((4,), dtype="int32", name="y")
    with pytest.raises(tg.TegradError, match="reduction must be 'mean', 'sum' or 'none'"):
        nn.softmax_cross_entropy(x, y, reduction="avg")
    with pytest.raises(tg.TegradError, match=r"label_smoothing must be in \[0, 1\]"):
        nn.softmax_cross_entropy(x, y, label_smoothing=1.5)
    with pytest.raises(tg.ShapeError, match=r"labels 'y' has shape \(4, 5\) but logits 'x4' "
                                            r"of shape \(4, 3, 2\) need \(4, 2\)"):
        nn.softmax_cross_entropy(tg.placeholder((4, 3, 2), name="x4"),
                                 tg.placeholder((4, 5), "int32", name="y"))
