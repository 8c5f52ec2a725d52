"""Shared by the test files: the modules of the package and the operator gradient cases.

A test taking the argument ``tegrad_module`` runs once per module of the installed
package (``tegrad``, and the folders ``solver`` and ``codegen`` installed as
``tegrad.solver`` and ``tegrad.codegen``); ``tegrad_module_files`` maps every module
name to its file.

Each entry of ``OPERATOR_CASES`` builds one operator of :mod:`tegrad.ops` or
:mod:`tegrad.nn` on tiny float64 placeholders (values away from kinks and ties). A test
taking the argument ``operator_name`` runs once per entry; the fixture ``operator_case``
gives ``(case, output)`` for it, ``operator_case_of(name, dtype)`` builds an entry with
float placeholders of another dtype, and ``operator_cases`` is the whole table.

Property tests draw new examples on every run, except under CI (``CI`` set), where each
test's examples are fixed (hypothesis' ``derandomize``): a submission is judged on the
same examples however often it runs, and new ones are explored on every other run.

Code several test files share is in the package ``support`` (``tests/support/``), which
they import as ``support``: this file puts ``tests/`` on the import path (pytest's
importlib import mode, set in setup.cfg, adds no folder itself), in every xdist worker
too, since each imports this file before any test file.
"""
import os
import pathlib
import sys
import zlib

import hypothesis
import numpy as np
import pytest

TESTS = pathlib.Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
# the helpers' asserts say what they compared when they fail, as a test file's do
pytest.register_assert_rewrite("support")

import tegrad as tg
from tegrad import nn, ops

F64 = "float64"

# compiled machine code is cached on disk (tegrad.codegen.object_cache): the tests keep
# theirs in a directory of their own, not the user's cache
if "TEGRAD_CACHE_DIR" not in os.environ:
    import tempfile
    os.environ["TEGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="tegrad-test-cache-")

hypothesis.settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    hypothesis.settings.load_profile("ci")


class Case:
    """Placeholders with feeds, built by an entry of the table."""

    def __init__(self, seed, dtype=F64):
        self.rng = np.random.default_rng(seed)
        self.feed = {}
        self.inputs = []
        self.dtype = dtype  # of the float placeholders

    def x(self, shape, name="x", lo=-1.0, hi=1.0, diff=True):
        t = tg.placeholder(shape, dtype=self.dtype, name=name)
        self.feed[t] = self.rng.uniform(lo, hi, size=shape)
        if diff:
            self.inputs.append(t)
        return t

    def ints(self, shape, lo, hi, name="idx"):
        t = tg.placeholder(shape, dtype="int32", name=name)
        self.feed[t] = self.rng.integers(lo, hi, size=shape).astype("int32")
        return t

    def mask(self, shape, name="mask"):
        t = tg.placeholder(shape, dtype=self.dtype, name=name)
        self.feed[t] = (self.rng.uniform(size=shape) > 0.4).astype(self.dtype)
        return t


def first_output(out):
    return out[0] if isinstance(out, (tuple, list)) else out


X4 = (1, 2, 4, 4)

OPERATOR_CASES = {
    # --- tegrad.ops.elementwise
    "log": lambda c: ops.log(c.x((2, 3), lo=0.5, hi=2)),
    "sqrt": lambda c: ops.sqrt(c.x((2, 3), lo=0.5, hi=2)),
    "exp": lambda c: ops.exp(c.x((2, 3))),
    "sigmoid": lambda c: ops.sigmoid(c.x((2, 3), lo=-3, hi=3)),
    "tanh": lambda c: ops.tanh(c.x((2, 3))),
    "tan": lambda c: ops.tan(c.x((2, 3))),
    "asin": lambda c: ops.asin(c.x((2, 3), lo=-0.9, hi=0.9)),
    "acos": lambda c: ops.acos(c.x((2, 3), lo=-0.9, hi=0.9)),
    "atan": lambda c: ops.atan(c.x((2, 3), lo=-3, hi=3)),
    "sinh": lambda c: ops.sinh(c.x((2, 3), lo=-2, hi=2)),
    "cosh": lambda c: ops.cosh(c.x((2, 3), lo=-2, hi=2)),
    "asinh": lambda c: ops.asinh(c.x((2, 3), lo=-3, hi=3)),
    "acosh": lambda c: ops.acosh(c.x((2, 3), lo=1.2, hi=3)),
    "atanh": lambda c: ops.atanh(c.x((2, 3), lo=-0.9, hi=0.9)),
    "log1p": lambda c: ops.log1p(c.x((2, 3), lo=-0.5, hi=2)),
    "expm1": lambda c: ops.expm1(c.x((2, 3))),
    "negative": lambda c: ops.negative(c.x((2, 3))),
    "abs": lambda c: ops.abs(c.x((2, 3))),
    "copy": lambda c: ops.copy(c.x((2, 3))),
    "cast": lambda c: ops.cast(c.x((2, 3)), c.dtype),
    "clip": lambda c: ops.clip(c.x((3, 4), lo=-2, hi=2), -0.7, 0.9),
    "floor": lambda c: ops.floor(c.x((2, 3), lo=0.1, hi=0.9)),
    "ceil": lambda c: ops.ceil(c.x((2, 3), lo=0.1, hi=0.9)),
    "round": lambda c: ops.round(c.x((2, 3), lo=0.1, hi=0.4)),
    "trunc": lambda c: ops.trunc(c.x((2, 3), lo=0.1, hi=0.9)),
    "full_tensor_value": lambda c: ops.full((2, 3), c.x((), "v"), dtype=c.dtype),
    "full_like_tensor_value": lambda c: ops.full_like(c.x((2, 3), diff=False), c.x((), "v")),
    # --- tegrad.ops.binary (broadcasting)
    "add": lambda c: ops.add(c.x((2, 3)), c.x((3,), "y")),
    "add_scalar": lambda c: ops.add(2.0, c.x((2, 3))),
    "subtract": lambda c: ops.subtract(c.x((2, 1)), c.x((1, 3), "y")),
    "multiply": lambda c: ops.multiply(c.x((2, 3)), c.x((2, 1), "y")),
    "divide": lambda c: ops.divide(c.x((2, 3)), c.x((3,), "y", lo=0.5, hi=2)),
    "power": lambda c: ops.power(c.x((2, 3), lo=0.5, hi=2), c.x((3,), "y")),
    "maximum": lambda c: ops.maximum(c.x((2, 3)), c.x((3,), "y")),
    "minimum": lambda c: ops.minimum(c.x((2, 3)), c.x((2, 1), "y")),
    "atan2": lambda c: ops.atan2(c.x((2, 3)), c.x((3,), "y", lo=0.5, hi=2)),
    "floor_divide": lambda c: ops.add(ops.floor_divide(c.x((2, 3), lo=2.1, hi=2.9), 1.0),
                                      c.x((3,), "y")),
    "mod": lambda c: ops.mod(c.x((2, 3), lo=2.1, hi=2.9), c.x((3,), "y", lo=1.0, hi=1.05)),
    "where": lambda c: ops.where(ops.greater(c.x((2, 3), "cond", diff=False), 0.0),
                                 c.x((2, 3)), c.x((3,), "y")),
    # --- tegrad.ops.broadcast
    "broadcast_to": lambda c: ops.broadcast_to(c.x((3, 1)), (2, 3, 4)),
    "broadcast_to_like": lambda c: ops.broadcast_to_like(c.x((1, 4)),
                                                         c.x((3, 4), "y", diff=False)),
    "collapse_sum_to": lambda c: ops.collapse_sum_to(c.x((2, 3, 4)), (3, 1)),
    "collapse_sum_like": lambda c: ops.collapse_sum_like(c.x((2, 3)),
                                                         c.x((3,), "y", diff=False)),
    # --- tegrad.ops.shape
    "reshape": lambda c: ops.reshape(c.x((2, 6)), (3, -1)),
    "reshape_like": lambda c: ops.reshape_like(c.x((2, 6)), c.x((4, 3), "y", diff=False)),
    "transpose": lambda c: ops.transpose(c.x((2, 3, 4)), (2, 0, 1)),
    "squeeze": lambda c: ops.squeeze(c.x((2, 1, 3)), axis=1),
    "expand_dims": lambda c: ops.expand_dims(c.x((2, 3)), 1, num=2),
    "flatten": lambda c: ops.flatten(c.x((2, 3, 2))),
    "concatenate": lambda c: ops.concatenate([c.x((2, 3)), c.x((1, 3), "y"),
                                              c.x((2, 3), "z")], axis=0),
    # --- tegrad.ops.slicing
    "strided_slice": lambda c: ops.strided_slice(c.x((5, 6)), [1, 0], [5, 6], [2, 3]),
    "strided_slice_negative": lambda c: ops.strided_slice(c.x((5,)), [4], [0], [-2]),
    "slice_like": lambda c: ops.slice_like(c.x((4, 5)), c.x((2, 3), "y", diff=False)),
    "split": lambda c: ops.split(c.x((6, 2)), 3, axis=0)[1],
    "pad_constant": lambda c: ops.pad(c.x((3, 4)), ((1, 2), (0, 1)), value=0.5),
    "pad_edge": lambda c: ops.pad(c.x((3, 4)), ((1, 2), (2, 1)), mode="edge"),
    "pad_reflect": lambda c: ops.pad(c.x((3, 4)), ((1, 2), (2, 1)), mode="reflect"),
    # --- tegrad.ops.layout / indexing
    "layout_transform": lambda c: ops.layout_transform(c.x((1, 4, 2, 3)), "NCHW", "NCHW2c"),
    "layout_transform_padded": lambda c: ops.layout_transform(c.x((1, 3, 2, 2)), "NCHW",
                                                              "NHWC2c"),
    "take_flat": lambda c: ops.take(c.x((3, 4)), c.ints((5,), 0, 12)),
    "take_axis_clip": lambda c: ops.take(c.x((3, 4)), c.ints((2, 3), -2, 6), axis=1),
    "take_wrap": lambda c: ops.take(c.x((3, 4)), c.ints((4,), -3, 5), axis=0, mode="wrap"),
    # --- tegrad.ops.reduce / linalg
    "sum": lambda c: ops.sum(c.x((2, 3, 4)), axis=(0, 2), keepdims=True),
    "sum_all": lambda c: ops.sum(c.x((2, 3))),
    "max": lambda c: ops.max(c.x((3, 4)), axis=1),
    "min": lambda c: ops.min(c.x((3, 4)), axis=0, keepdims=True),
    "prod": lambda c: ops.prod(c.x((3, 4), lo=0.5, hi=1.5), axis=1),
    "mean": lambda c: ops.mean(c.x((2, 3, 4)), axis=1),
    "variance": lambda c: ops.variance(c.x((3, 4)), axis=1),
    "variance_unbiased": lambda c: ops.variance(c.x((3, 4)), axis=None, unbiased=True),
    "argmax_with_value": lambda c: ops.argmax_with_value(c.x((3, 5)), axis=1)[1],
    "argmin_with_value": lambda c: ops.argmin_with_value(c.x((2, 3, 4)))[1],
    "mean_var": lambda c: ops.mean_var(c.x((3, 4)), axis=1, correction=1)[1],
    "mean_var_mean": lambda c: ops.mean_var(c.x((2, 3, 4)), axis=(0, 2))[0],
    "matmul": lambda c: ops.matmul(c.x((2, 3)), c.x((3, 4), "y")),
    "matmul_batched": lambda c: ops.matmul(c.x((2, 2, 3)), c.x((3, 2), "y")),
    # --- tegrad.nn activations
    "relu": lambda c: nn.relu(c.x((2, 5))),
    "leaky_relu": lambda c: nn.leaky_relu(c.x((2, 5)), alpha=0.2),
    "prelu": lambda c: nn.prelu(c.x((2, 3, 2)), c.x((3,), "alpha")),
    "softmax": lambda c: nn.softmax(c.x((2, 4))),
    "log_softmax": lambda c: nn.log_softmax(c.x((2, 4)), axis=0),
    # --- dense, dropout, norms
    "dense": lambda c: nn.dense(c.x((2, 3)), c.x((4, 3), "w"), c.x((4,), "b")),
    "bias_add": lambda c: nn.bias_add(c.x((2, 3, 2)), c.x((3,), "b")),
    "dropout_mask": lambda c: nn.dropout(c.x((3, 4)), rate=0.25, mask=c.mask((3, 4))),
    "dropout_hash": lambda c: nn.dropout(c.x((3, 4)), rate=0.5, seed=3),
    "batch_norm_train": lambda c: nn.batch_norm(c.x((3, 2, 2)), c.x((2,), "g"),
                                                c.x((2,), "b"))[0],
    "batch_norm_infer": lambda c: nn.batch_norm(c.x((3, 2, 2)), c.x((2,), "g"), c.x((2,), "b"),
                                                c.x((2,), "m"), c.x((2,), "v", lo=0.5, hi=1),
                                                training=False)[0],
    "lrn": lambda c: nn.lrn(c.x((1, 4, 2, 2)), size=3, alpha=0.5),
    "l2_normalize": lambda c: nn.l2_normalize(c.x((2, 3)), axis=1),
    # --- convolutions
    "conv2d": lambda c: nn.conv2d(c.x((1, 2, 5, 5)), c.x((3, 2, 3, 3), "w"), padding=1),
    "conv2d_stride_dilation": lambda c: nn.conv2d(c.x((1, 2, 6, 6)), c.x((2, 2, 2, 2), "w"),
                                                  stride=2, dilation=2, padding=1),
    "conv2d_groups": lambda c: nn.conv2d(c.x((1, 4, 4, 4)), c.x((2, 2, 2, 2), "w"),
                                         groups=2, stride=(1, 2)),
    "conv2d_transpose": lambda c: nn.conv2d_transpose(c.x((1, 2, 3, 3)),
                                                      c.x((2, 2, 2, 2), "w"), stride=2,
                                                      padding=1),
    "conv2d_winograd_weight_transform": lambda c: nn.conv2d_winograd_weight_transform(
        c.x((2, 2, 3, 3), "w")),
    "conv2d_winograd_without_weight_transform": lambda c: nn.conv2d_winograd_without_weight_transform(
        c.x((1, 2, 4, 4)), nn.conv2d_winograd_weight_transform(c.x((2, 2, 3, 3), "w")),
        padding=1),
    # --- pools and resizing
    "max_pool2d": lambda c: nn.max_pool2d(c.x(X4), 2, stride=1, padding=1),
    "max_pool2d_ceil": lambda c: nn.max_pool2d(c.x((1, 1, 5, 5)), 2, stride=2, ceil_mode=True),
    "avg_pool2d": lambda c: nn.avg_pool2d(c.x(X4), 3, stride=2, padding=1),
    "avg_pool2d_exclude_pad": lambda c: nn.avg_pool2d(c.x(X4), 3, stride=2, padding=1,
                                                      count_include_pad=False),
    "global_max_pool2d": lambda c: nn.global_max_pool2d(c.x((1, 2, 3, 3))),
    "global_avg_pool2d": lambda c: nn.global_avg_pool2d(c.x((1, 2, 3, 3))),
    "upsampling_nearest": lambda c: nn.upsampling(c.x((1, 1, 2, 3)), 2),
    "upsampling_bilinear": lambda c: nn.upsampling(c.x((1, 1, 2, 3)), 2, method="bilinear"),
    "resize_bilinear_align": lambda c: nn.resize(c.x((1, 1, 3, 3)), (4, 5), method="bilinear",
                                                 align_corners=True),
    # --- losses
    "softmax_cross_entropy": lambda c: nn.softmax_cross_entropy(c.x((3, 4)),
                                                                c.ints((3,), 0, 4, "labels")),
    "binary_cross_entropy": lambda c: nn.binary_cross_entropy(
        c.x((2, 3), "p", lo=0.1, hi=0.9), c.x((2, 3), "t", lo=0, hi=1)),
    "mse_loss": lambda c: nn.mse_loss(c.x((2, 3)), c.x((2, 3), "y")),
    "softmax_cross_entropy_spatial_ignore_smoothing": lambda c: nn.softmax_cross_entropy(
        c.x((3, 4, 2)), c.ints((3, 2), -1, 4, "labels"), ignore_index=-1, label_smoothing=0.1),
    "softmax_cross_entropy_none": lambda c: nn.softmax_cross_entropy(
        c.x((3, 4)), c.ints((3,), 0, 4, "labels"), reduction="none"),
    # --- layers of today's models
    "gelu": lambda c: nn.gelu(c.x((2, 5), lo=-3, hi=3)),
    "gelu_tanh": lambda c: nn.gelu(c.x((2, 5), lo=-3, hi=3), approximate="tanh"),
    "silu": lambda c: nn.silu(c.x((2, 5), lo=-3, hi=3)),
    "softplus": lambda c: nn.softplus(c.x((2, 5), lo=-3, hi=3), beta=2, threshold=3),
    "layer_norm": lambda c: nn.layer_norm(c.x((3, 2, 3)), c.x((2, 3), "g"), c.x((2, 3), "b"),
                                          axis=1),
    "rms_norm": lambda c: nn.rms_norm(c.x((3, 4)), c.x((4,), "g")),
    "embedding": lambda c: nn.embedding(c.x((5, 3), "table"), c.ints((2, 4), 0, 5, "ids")),
    "conv1d_causal": lambda c: nn.conv1d(c.x((2, 2, 6)), c.x((3, 2, 3), "w"), padding=(2, 0)),
    "conv1d_groups": lambda c: nn.conv1d(c.x((1, 4, 7)), c.x((2, 2, 2), "w"), groups=2,
                                         stride=2, dilation=2, padding=1),
    "conv2d_per_side_padding": lambda c: nn.conv2d(c.x((1, 2, 4, 4)), c.x((2, 2, 3, 2), "w"),
                                                   padding=((2, 0), (1, 0))),
    "scaled_dot_product_attention": lambda c: nn.scaled_dot_product_attention(
        c.x((2, 3, 2)), c.x((2, 4, 2), "k"), c.x((2, 4, 3), "v")),
    "scaled_dot_product_attention_causal": lambda c: nn.scaled_dot_product_attention(
        c.x((2, 4, 2)), c.x((2, 4, 2), "k"), c.x((2, 4, 3), "v"), causal=True),
    "multi_head_attention": lambda c: nn.multi_head_attention(
        c.x((2, 3, 4)), c.x((2, 3, 4), "key"), c.x((2, 3, 4), "value"), c.x((4, 4), "wq"),
        c.x((4, 4), "wk"), c.x((4, 4), "wv"), c.x((4, 4), "wo"), num_heads=2,
        b_o=c.x((4,), "bo"), causal=True),
}


ROOT = pathlib.Path(__file__).resolve().parent.parent
#: folders at the top of the repository and the import names they install as
TOP_LEVEL = {"tegrad": "tegrad", "solver": "tegrad.solver", "codegen": "tegrad.codegen"}


def module_files():
    """``{module name: path}`` of every module of the package."""
    out = {}
    for folder, name in TOP_LEVEL.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join((name,) + rel)] = path
    return out


MODULE_FILES = module_files()


def pytest_generate_tests(metafunc):
    if "operator_name" in metafunc.fixturenames:
        metafunc.parametrize("operator_name", sorted(OPERATOR_CASES))
    if "tegrad_module" in metafunc.fixturenames:
        metafunc.parametrize("tegrad_module", sorted(MODULE_FILES))


@pytest.fixture
def tegrad_module_files():
    return MODULE_FILES


def build_operator_case(name, dtype=F64):
    """``(case, output)``: the entry ``name`` built on the placeholders of a case seeded
    by the name, its float placeholders of ``dtype``."""
    case = Case(zlib.crc32(name.encode()), dtype)
    return case, first_output(OPERATOR_CASES[name](case))


@pytest.fixture
def operator_case(operator_name):
    """``(case, output)``: the operator built on the placeholders of a seeded case."""
    return build_operator_case(operator_name)


@pytest.fixture
def operator_case_of():
    """:func:`build_operator_case`: an entry built with float placeholders of a dtype."""
    return build_operator_case


@pytest.fixture
def operator_cases():
    return OPERATOR_CASES
