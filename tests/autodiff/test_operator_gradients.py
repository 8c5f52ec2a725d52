"""Gradients of every differentiable operator of tegrad.ops and tegrad.nn.

Table-driven (the table is in ``tests/conftest.py``): each entry builds the operator on
tiny float64 placeholders (values away from kinks and ties) and is checked with ``check_grad`` against central finite
differences with a random head. Hand-derived numpy gradients for the main layers are
in ``test_operator_gradients_numpy.py``.
"""
import warnings

from tegrad import nn, ops
from tegrad.testing import check_grad


def test_operator_gradient(operator_case):
    case, out = operator_case
    assert check_grad(out, case.inputs, feed=case.feed, head="random", rng=7) < 1e-6


#: every operator of the library with a mathematical derivative is in the table (entries
#: may add a suffix for an attribute setting); the rest are listed with the reason
NOT_DIFFERENTIABLE = {
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",  # bool
    "right_shift", "left_shift", "argmax", "argmin", "one_hot",  # integer outputs
    "zeros", "zeros_like", "ones", "ones_like",  # constants
}

#: the operators of the library when this table was written: each must stay covered;
#: operators added later only warn until they get an entry
KNOWN = {
    "abs", "add", "argmax", "argmin", "avg_pool2d", "batch_norm", "bias_add",
    "binary_cross_entropy", "broadcast_to", "broadcast_to_like", "cast", "ceil", "clip",
    "collapse_sum_like", "collapse_sum_to", "concatenate", "conv2d", "conv2d_transpose",
    "conv2d_winograd_weight_transform", "conv2d_winograd_without_weight_transform", "copy",
    "dense", "divide", "dropout", "equal", "exp", "expand_dims", "flatten", "floor",
    "floor_divide", "full", "full_like", "global_avg_pool2d", "global_max_pool2d", "greater",
    "greater_equal", "l2_normalize", "layout_transform", "leaky_relu", "left_shift", "less",
    "less_equal", "log", "log_softmax", "lrn", "matmul", "max", "max_pool2d", "maximum",
    "mean", "min", "minimum", "mod", "mse_loss", "multiply", "negative", "not_equal",
    "one_hot", "ones", "ones_like", "pad", "power", "prelu", "prod", "relu", "reshape",
    "reshape_like", "resize", "right_shift", "round", "sigmoid", "slice_like", "softmax",
    "softmax_cross_entropy", "split", "sqrt", "squeeze", "strided_slice", "subtract", "sum",
    "take", "tanh", "transpose", "trunc", "upsampling", "variance", "where", "zeros",
    "zeros_like",
}


def test_every_differentiable_operator_is_covered(operator_cases):
    names = set(ops.__all__) | set(nn.__all__)
    covered = {n for n in names for entry in operator_cases if entry == n or entry.startswith(n + "_")}
    missing = names - covered - NOT_DIFFERENTIABLE
    assert not sorted(missing & KNOWN), f"operators without a gradient test: {missing}"
    if missing:
        warnings.warn(f"operators added since the gradient table was written, without a "
                      f"gradient test yet: {sorted(missing)}")
