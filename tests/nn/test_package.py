"""The tegrad.nn package: exports, docstrings, module sizes, stage names."""
import inspect
import pathlib

import tegrad as tg
from tegrad import nn

OPERATORS = ["relu", "leaky_relu", "prelu", "softmax", "log_softmax", "bias_add", "dropout",
             "batch_norm", "conv2d", "conv2d_transpose", "dense", "max_pool2d", "avg_pool2d",
             "global_max_pool2d", "global_avg_pool2d", "upsampling", "resize", "lrn",
             "l2_normalize", "conv2d_winograd_weight_transform",
             "conv2d_winograd_without_weight_transform", "softmax_cross_entropy",
             "binary_cross_entropy", "mse_loss", "gelu", "silu", "softplus", "layer_norm",
             "rms_norm", "embedding", "conv1d", "scaled_dot_product_attention",
             "multi_head_attention"]


def test_all_lists_every_operator():
    assert sorted(nn.__all__) == sorted(OPERATORS)
    for name in OPERATORS:
        assert callable(getattr(nn, name))


def test_every_operator_has_a_docstring_with_its_formula():
    for name in OPERATORS:
        doc = inspect.getdoc(getattr(nn, name))
        assert doc and len(doc) > 60, name


def test_keyword_names_are_fixed():
    expected = {
        "leaky_relu": ["x", "alpha"], "prelu": ["x", "alpha", "axis"],
        "softmax": ["x", "axis"], "log_softmax": ["x", "axis"], "bias_add": ["x", "b", "axis"],
        "dropout": ["x", "rate", "mask", "seed", "training", "stream"],
        "batch_norm": ["x", "gamma", "beta", "mean", "var", "axis", "epsilon", "training"],
        "conv2d": ["x", "w", "stride", "padding", "dilation", "groups"],
        "conv2d_transpose": ["x", "w", "stride", "padding", "output_padding", "dilation"],
        "dense": ["x", "w", "bias"],
        "max_pool2d": ["x", "kernel", "stride", "padding", "dilation", "ceil_mode",
                       "count_include_pad"],
        "avg_pool2d": ["x", "kernel", "stride", "padding", "dilation", "ceil_mode",
                       "count_include_pad"],
        "upsampling": ["x", "scale", "method", "align_corners"],
        "resize": ["x", "size", "method", "align_corners"],
        "lrn": ["x", "size", "axis", "alpha", "beta", "bias"],
        "l2_normalize": ["x", "eps", "axis"],
        "conv2d_winograd_weight_transform": ["w", "tile_size"],
        "conv2d_winograd_without_weight_transform": ["x", "u", "stride", "padding", "tile_size"],
        "softmax_cross_entropy": ["logits", "labels", "ignore_index", "label_smoothing",
                                  "reduction"],
        "gelu": ["x", "approximate"], "silu": ["x"], "softplus": ["x", "beta", "threshold"],
        "layer_norm": ["x", "gamma", "beta", "axis", "eps"],
        "rms_norm": ["x", "gamma", "axis", "eps"], "embedding": ["table", "ids"],
        "conv1d": ["x", "w", "stride", "padding", "dilation", "groups"],
        "scaled_dot_product_attention": ["q", "k", "v", "mask", "causal", "scale"],
        "binary_cross_entropy": ["probs", "targets"], "mse_loss": ["a", "b"],
    }
    for name, params in expected.items():
        assert list(inspect.signature(getattr(nn, name)).parameters) == params, name


def test_modules_are_small():
    for path in pathlib.Path(nn.__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


def test_outputs_are_named_after_the_operator():
    x = tg.placeholder((1, 2, 6, 6), dtype="float64", name="x")
    w = tg.placeholder((2, 2, 3, 3), dtype="float64", name="w")
    v = tg.placeholder((2, 2), dtype="float64", name="v")
    b = tg.placeholder((2,), dtype="float64", name="b")
    labels = tg.placeholder((2,), dtype="int32", name="labels")
    s3 = tg.placeholder((2, 2, 2), dtype="float64", name="s3")
    u = nn.conv2d_winograd_weight_transform(w)
    built = {
        "relu": nn.relu(x), "leaky_relu": nn.leaky_relu(x), "prelu": nn.prelu(x, b),
        "softmax": nn.softmax(x), "log_softmax": nn.log_softmax(x), "dropout": nn.dropout(x),
        "batch_norm": nn.batch_norm(x, None, None)[0], "conv2d": nn.conv2d(x, w),
        "conv2d_transpose": nn.conv2d_transpose(x, w), "dense": nn.dense(v, v),
        "bias_add": nn.bias_add(v, b), "max_pool2d": nn.max_pool2d(x, 2),
        "avg_pool2d": nn.avg_pool2d(x, 2), "global_max_pool2d": nn.global_max_pool2d(x),
        "global_avg_pool2d": nn.global_avg_pool2d(x), "upsampling": nn.upsampling(x),
        "resize": nn.resize(x, 3), "lrn": nn.lrn(x), "l2_normalize": nn.l2_normalize(x),
        "conv2d_winograd_weight_transform": u,
        "conv2d_winograd_without_weight_transform":
            nn.conv2d_winograd_without_weight_transform(x, u),
        "softmax_cross_entropy": nn.softmax_cross_entropy(v, labels),
        "binary_cross_entropy": nn.binary_cross_entropy(v, v), "mse_loss": nn.mse_loss(v, v),
        "gelu": nn.gelu(x), "silu": nn.silu(x), "softplus": nn.softplus(x),
        "layer_norm": nn.layer_norm(x), "rms_norm": nn.rms_norm(x),
        "embedding": nn.embedding(v, labels), "conv1d": nn.conv1d(s3, s3),
        "scaled_dot_product_attention": nn.scaled_dot_product_attention(x, x, x),
        "multi_head_attention": nn.multi_head_attention(s3, s3, s3, v, v, v, v, num_heads=1),
    }
    assert sorted(built) == sorted(OPERATORS)
    for name, t in built.items():
        assert t.name == name
