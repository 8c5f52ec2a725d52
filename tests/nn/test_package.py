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
             "binary_cross_entropy", "mse_loss"]


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
        "dropout": ["x", "rate", "mask", "seed"],
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
        "softmax_cross_entropy": ["logits", "labels"],
        "binary_cross_entropy": ["probs", "targets"], "mse_loss": ["a", "b"],
    }
    for name, params in expected.items():
        assert list(inspect.signature(getattr(nn, name)).parameters) == params, name


def test_modules_are_small():
    for path in pathlib.Path(nn.__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


def test_stages_are_named_after_the_operator():
    x = tg.placeholder((1, 2, 6, 6), dtype="float64", name="x")
    w = tg.placeholder((2, 2, 3, 3), dtype="float64", name="w")
    assert nn.conv2d(x, w).name == "conv2d"
    assert nn.relu(x).name == "relu"
    assert nn.batch_norm(x, None, None)[0].name == "batch_norm"
    assert nn.upsampling(x).name == "upsampling"
    assert nn.l2_normalize(x).name == "l2_normalize"
