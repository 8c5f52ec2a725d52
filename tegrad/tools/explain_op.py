"""The ``explain`` command: one operator of :mod:`tegrad.ops` or :mod:`tegrad.nn` on small
shapes, its gradients before and after zero elimination with their costs, and the
compiled loop nest of the optimised ones.

``SAMPLES`` gives, for every differentiable operator, the shapes of its tensor arguments
and the attributes it cannot do without; any other attribute of the operator's signature
can be set from the command line (``explain conv2d --stride 2``).

>>> print(explain("relu").splitlines()[0])
relu(x: float32 (2, 5)) -> float32 (2, 5); forward: iterations=10, flops=10, memory=0
"""
from __future__ import annotations

import ast
import dataclasses
import inspect

import tegrad as tg
from tegrad import nn, ops
from tegrad.tools.compile import compile_program


class ExplainError(Exception):
    """A request the explainer cannot build (unknown operator or attribute); the message
    is one line that lists what exists."""


@dataclasses.dataclass(frozen=True)
class Int:
    """An int32 tensor argument of ``shape`` (class ids, gather indices)."""
    shape: tuple


@dataclasses.dataclass(frozen=True)
class Bool:
    """A bool tensor argument of ``shape`` (a condition)."""
    shape: tuple


def _sample(tensors, **attrs):
    return (tensors, attrs)


_UNARY = {"x": (2, 3)}
_BINARY = {"lhs": (2, 3), "rhs": (3,)}
_REDUCE = {"x": (3, 4)}
_IMAGE = {"x": (1, 2, 6, 6)}

#: operator name -> (tensor arguments: name -> shape, a list of shapes, Int or Bool;
#: attributes set by default)
SAMPLES = {
    # tegrad.ops
    **{name: _sample(_UNARY) for name in (
        "log", "sqrt", "exp", "sigmoid", "tanh", "negative", "floor", "ceil", "trunc",
        "round", "abs", "copy", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
        "acosh", "atanh", "log1p", "expm1")},
    "cast": _sample(_UNARY, dtype="float32"),
    "clip": _sample(_UNARY, a_min=-0.5, a_max=0.5),
    "full": _sample({"fill_value": ()}, shape=(2, 3)),
    "full_like": _sample({"x": (2, 3), "fill_value": ()}),
    **{name: _sample(_BINARY) for name in (
        "add", "subtract", "multiply", "divide", "floor_divide", "mod", "power", "maximum",
        "minimum", "atan2")},
    "where": _sample({"cond": Bool((2, 3)), "a": (2, 3), "b": (3,)}),
    "broadcast_to": _sample({"x": (3, 1)}, shape=(2, 3, 4)),
    "broadcast_to_like": _sample({"x": (1, 4), "y": (3, 4)}),
    "collapse_sum_to": _sample({"x": (2, 3, 4)}, shape=(3, 1)),
    "collapse_sum_like": _sample({"x": (2, 3), "target": (3,)}),
    "reshape": _sample({"x": (2, 6)}, shape=(3, 4)),
    "reshape_like": _sample({"x": (2, 6), "y": (4, 3)}),
    "transpose": _sample({"x": (2, 3, 4)}),
    "squeeze": _sample({"x": (2, 1, 3)}),
    "expand_dims": _sample({"x": (2, 3)}, axis=1),
    "flatten": _sample({"x": (2, 3, 2)}),
    "concatenate": _sample({"tensors": [(2, 3), (1, 3)]}),
    "strided_slice": _sample({"x": (5, 6)}, begin=(1, 0), end=(5, 6), strides=(2, 3)),
    "slice_like": _sample({"x": (4, 5), "shape_like": (2, 3)}),
    "split": _sample({"x": (6, 2)}, indices_or_sections=3),
    "pad": _sample({"x": (3, 4)}, pad_width=1),
    "layout_transform": _sample({"x": (1, 4, 2, 3)}, src_layout="NCHW", dst_layout="NCHW2c"),
    "take": _sample({"x": (3, 4), "indices": Int((5,))}),
    **{name: _sample(_REDUCE) for name in ("sum", "max", "min", "prod", "mean", "variance")},
    **{name: _sample(_REDUCE, axis=1) for name in ("argmax_with_value", "argmin_with_value",
                                                   "mean_var")},
    "matmul": _sample({"a": (2, 3), "b": (3, 4)}),
    # tegrad.nn
    **{name: _sample({"x": (2, 5)}) for name in ("relu", "leaky_relu", "softmax",
                                                 "log_softmax", "l2_normalize")},
    **{name: _sample({"x": (2, 3)}) for name in ("gelu", "silu", "softplus", "layer_norm",
                                                 "rms_norm")},
    "embedding": _sample({"table": (5, 3), "ids": Int((2, 4))}),
    "conv1d": _sample({"x": (1, 2, 8), "w": (3, 2, 3)}),
    "scaled_dot_product_attention": _sample({"q": (2, 3, 2), "k": (2, 4, 2), "v": (2, 4, 3)}),
    "multi_head_attention": _sample({"query": (2, 3, 4), "key": (2, 3, 4), "value": (2, 3, 4),
                                     "w_q": (4, 4), "w_k": (4, 4), "w_v": (4, 4),
                                     "w_o": (4, 4)}, num_heads=2),
    "prelu": _sample({"x": (2, 3, 2), "alpha": (3,)}),
    "bias_add": _sample({"x": (2, 3, 2), "b": (3,)}),
    "dense": _sample({"x": (4, 8), "w": (6, 8), "bias": (6,)}),
    "dropout": _sample({"x": (3, 4)}),
    "batch_norm": _sample({"x": (3, 2, 2), "gamma": (2,), "beta": (2,)}),
    "lrn": _sample({"x": (1, 4, 2, 2)}, size=3),
    "conv2d": _sample({"x": (1, 2, 8, 8), "w": (4, 2, 3, 3)}),
    "conv2d_transpose": _sample({"x": (1, 2, 4, 4), "w": (2, 3, 3, 3)}),
    "max_pool2d": _sample(_IMAGE, kernel=2),
    "avg_pool2d": _sample(_IMAGE, kernel=2),
    "global_max_pool2d": _sample({"x": (1, 2, 4, 4)}),
    "global_avg_pool2d": _sample({"x": (1, 2, 4, 4)}),
    "upsampling": _sample({"x": (1, 1, 3, 3)}),
    "resize": _sample({"x": (1, 1, 3, 3)}, size=(5, 5)),
    "conv2d_winograd_weight_transform": _sample({"w": (4, 2, 3, 3)}),
    "conv2d_winograd_without_weight_transform": _sample({"x": (1, 2, 6, 6),
                                                         "u": (4, 4, 4, 2)}),
    "softmax_cross_entropy": _sample({"logits": (4, 10), "labels": Int((4,))}),
    "binary_cross_entropy": _sample({"probs": (2, 3), "targets": (2, 3)}),
    "mse_loss": _sample({"a": (2, 3), "b": (2, 3)}),
}

#: operators of the library without a derivative (their outputs are bools, integers or
#: constants), so they have no sample
NOT_DIFFERENTIABLE = {
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    "right_shift", "left_shift", "argmax", "argmin", "one_hot",
    "zeros", "zeros_like", "ones", "ones_like",
}


def operator_function(name):
    """The function of operator ``name`` in tegrad.nn or tegrad.ops."""
    module = nn if name in nn.__all__ else ops
    return getattr(module, name)


def attributes(name):
    """The attribute names of operator ``name``: its parameters that are not tensors."""
    tensors = SAMPLES[name][0]
    params = inspect.signature(operator_function(name)).parameters
    return [p for p in params if p not in tensors]


def parse_value(text):
    """An attribute value from the command line: int, float, tuple, bool, None or str.

    >>> [parse_value(t) for t in ("2", "0.5", "2,2", "(1, 2)", "true", "none", "bilinear")]
    [2, 0.5, (2, 2), (1, 2), True, None, 'bilinear']
    """
    words = {"true": True, "false": False, "none": None}
    if text.lower() in words:
        return words[text.lower()]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return tuple(value) if isinstance(value, list) else value


def _placeholder(spec, name):
    if isinstance(spec, Int):
        return tg.placeholder(spec.shape, dtype="int32", name=name)
    if isinstance(spec, Bool):
        return tg.placeholder(spec.shape, dtype="bool", name=name)
    return tg.placeholder(tuple(spec), name=name)


def _sample_of(name):
    if name not in SAMPLES:
        why = " (it has no derivative)" if name in NOT_DIFFERENTIABLE else ""
        raise ExplainError(f"unknown operator {name!r}{why}; operators: "
                           f"{', '.join(sorted(SAMPLES))}")
    return SAMPLES[name]


def _describe_spec(spec):
    if isinstance(spec, list):
        return "[" + ", ".join(_describe_spec(s) for s in spec) + "]"
    if isinstance(spec, Int):
        return f"int32 {spec.shape}"
    if isinstance(spec, Bool):
        return f"bool {spec.shape}"
    return f"float32 {tuple(spec)}"


def usage(name):
    """The text of ``python -m tegrad explain NAME --help``: the operator's tensors (on
    their sample shapes) and every attribute with the value the explainer uses.

    >>> print(usage("max_pool2d").splitlines()[4])
      --kernel (2 here)
    """
    tensors, sample_attrs = _sample_of(name)
    params = inspect.signature(operator_function(name)).parameters
    doc = (inspect.getdoc(operator_function(name)) or "").split("\n\n")[0].replace("\n", " ")
    lines = [f"usage: tegrad explain {name} [--attribute value ...]",
             f"{name}: {doc}" if doc else name,
             "tensors: " + ", ".join(f"{arg}: {_describe_spec(spec)}"
                                     for arg, spec in tensors.items()),
             "attributes (and the values used unless given):"]
    for attr in attributes(name):
        value = sample_attrs.get(attr, params[attr].default)
        shown = "required" if value is inspect.Parameter.empty else f"{value!r} here"
        lines.append(f"  --{attr} ({shown})")
    if not attributes(name):
        lines.append("  (no attributes)")
    return "\n".join(lines)


def build_operator(name, overrides=None):
    """Operator ``name`` applied to placeholders of its sample shapes with its sample
    attributes updated by ``overrides``; returns (output, tensor arguments, attributes).
    An operator with several outputs gives its first of a float dtype (the values of
    ``argmax_with_value``, whose indices have no derivative)."""
    tensors, attrs = _sample_of(name)
    allowed = attributes(name)
    overrides = dict(overrides or {})
    for key in overrides:
        if key not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise ExplainError(f"{name} has no attribute {key!r}; attributes: {listed}")
    attrs = {**attrs, **overrides}
    args = {}
    for arg, spec in tensors.items():
        if isinstance(spec, list):
            args[arg] = [_placeholder(s, f"{arg}{i}") for i, s in enumerate(spec)]
        else:
            args[arg] = _placeholder(spec, arg)
    try:
        out = operator_function(name)(**args, **attrs)
    except (TypeError, ValueError) as err:  # an attribute value of the wrong kind
        raise ExplainError(f"{name}: {err}") from None
    if isinstance(out, (tuple, list)):
        out = next((o for o in out if tg.dtypes.is_float(o.dtype)), out[0])
    return out, args, attrs


def _describe_call(name, args, attrs, out):
    def shape_of(t):
        return f"{t.dtype} {t.shape}"
    parts = []
    for arg, value in args.items():
        if isinstance(value, list):
            parts.append(f"{arg}: [{', '.join(shape_of(t) for t in value)}]")
        else:
            parts.append(f"{arg}: {shape_of(value)}")
    parts += [f"{k}={v!r}" for k, v in attrs.items()]
    return f"{name}({', '.join(parts)}) -> {shape_of(out)}"


def explain(name, overrides=None):
    """The text of ``python -m tegrad explain NAME --attr value ...``."""
    out, args, attrs = build_operator(name, overrides)
    inputs = [t for t in tg.placeholders([out]) if tg.dtypes.is_float(t.dtype)]
    lines = [f"{_describe_call(name, args, attrs, out)}; forward: {tg.cost([out])}"]
    if not inputs:
        lines.append("no float input reaches the output: nothing to differentiate")
        return "\n".join(lines)
    names = ", ".join(t.name for t in inputs)
    if out.ndim == 0:
        res = tg.differentiate(out, inputs)
        lines.append(f"differentiated: the scalar {out.name} with respect to {names}")
    else:
        # a head of ones (the gradient of sum(out)) would hide which element of the
        # output each gradient element reads: flatten's dx would be 1.0
        head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
        res = tg.differentiate(out, inputs, head=head)
        lines.append(f"differentiated: the loss sum(head * {out.name}) with respect to "
                     f"{names}, where head, an input of {out.name}'s shape, stands for the "
                     f"gradient from the layers above (random numbers in a training step)")
    lines.append(str(res.explain()))
    program = compile_program(tg.placeholders(res.result), res)
    if program.loops is None:
        lines.append("compiled loop nest: native compilation is unavailable in this version "
                     "of tegrad (no tegrad.build); the gradients run on the reference "
                     "evaluator")
    else:
        lines.append("compiled loop nest of the optimised gradients:")
        lines.append(str(program.loops))
    return "\n".join(lines)
