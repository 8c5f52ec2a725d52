"""Neural-network layers and losses (NCHW images, OIHW weights) as computes.

Every operator takes and returns :class:`tegrad.Tensor` s, builds one compute stage per
layer where it can (named after the operator), keeps its index expressions affine and
pads through reduction masks rather than padded copies. See each function's docstring
for its formula; :mod:`tegrad.nn._util` holds the shared argument checks.
"""
from tegrad.nn.activation import (gelu, leaky_relu, log_softmax, prelu, relu, silu, softmax,
                                  softplus)
from tegrad.nn.attention import multi_head_attention, scaled_dot_product_attention
from tegrad.nn.conv import conv1d, conv2d, conv2d_transpose
from tegrad.nn.dense import bias_add, dense
from tegrad.nn.dropout import dropout
from tegrad.nn.embedding import embedding
from tegrad.nn.loss import binary_cross_entropy, mse_loss, softmax_cross_entropy
from tegrad.nn.norm import batch_norm, l2_normalize, layer_norm, lrn, rms_norm
from tegrad.nn.pool import avg_pool2d, global_avg_pool2d, global_max_pool2d, max_pool2d
from tegrad.nn.resize import resize, upsampling
from tegrad.nn.winograd import conv2d_winograd_weight_transform, conv2d_winograd_without_weight_transform

__all__ = [
    "relu", "leaky_relu", "prelu", "gelu", "silu", "softplus", "softmax", "log_softmax",
    "bias_add", "dense",
    "dropout", "embedding",
    "batch_norm", "layer_norm", "rms_norm", "lrn", "l2_normalize",
    "conv1d", "conv2d", "conv2d_transpose",
    "max_pool2d", "avg_pool2d", "global_max_pool2d", "global_avg_pool2d",
    "upsampling", "resize",
    "conv2d_winograd_weight_transform", "conv2d_winograd_without_weight_transform",
    "softmax_cross_entropy", "binary_cross_entropy", "mse_loss",
    "scaled_dot_product_attention", "multi_head_attention",
]
