"""The operator library as a whole: __all__, docstrings, stage names."""
import inspect

import pytest

import tegrad as tg
from tegrad import ops

EXPECTED = """log sqrt exp sigmoid tanh negative floor ceil trunc round abs copy cast add subtract
multiply divide mod power maximum minimum right_shift left_shift equal not_equal greater
greater_equal less less_equal where clip zeros zeros_like ones ones_like full full_like reshape
reshape_like transpose squeeze expand_dims concatenate split flatten broadcast_to
broadcast_to_like collapse_sum_like collapse_sum_to slice_like strided_slice layout_transform pad
take one_hot sum max min mean prod variance argmax argmin matmul floor_divide tan asin acos atan
atan2 sinh cosh asinh acosh atanh log1p expm1 argmax_with_value argmin_with_value
mean_var""".split()

def test_all_lists_every_operator_once():
    assert sorted(ops.__all__) == sorted(EXPECTED)
    assert len(set(ops.__all__)) == len(ops.__all__)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_operator_is_documented_and_named(name):
    fn = getattr(ops, name)
    assert callable(fn) and fn.__name__ == name
    assert fn.__doc__ and len(fn.__doc__.strip()) > 20


def test_fixed_keyword_names():
    signatures = {
        "cast": "(x, dtype)", "clip": "(x, a_min, a_max)", "zeros": "(shape, dtype='float32')",
        "full": "(shape, fill_value, dtype='float32')", "full_like": "(x, fill_value)",
        "reshape": "(x, shape)", "reshape_like": "(x, y)", "transpose": "(x, axes=None)",
        "squeeze": "(x, axis=None)", "expand_dims": "(x, axis, num=1)",
        "concatenate": "(tensors, axis=0)", "split": "(x, indices_or_sections, axis=0)",
        "broadcast_to": "(x, shape)", "collapse_sum_like": "(x, target)",
        "collapse_sum_to": "(x, shape)", "slice_like": "(x, shape_like, axes=None)",
        "strided_slice": "(x, begin, end, strides=None)",
        "layout_transform": "(x, src_layout, dst_layout)",
        "pad": "(x, pad_width, mode='constant', value=0)",
        "take": "(x, indices, axis=None, mode='clip')",
        "one_hot": "(indices, depth, axis=-1, on_value=1.0, off_value=0.0, dtype='float32')",
        "sum": "(x, axis=None, keepdims=False)", "argmax": "(x, axis=None, keepdims=False)",
        "where": "(cond, a, b)", "add": "(lhs, rhs)", "matmul": "(a, b)",
    }
    for name, signature in signatures.items():
        assert str(inspect.signature(getattr(ops, name))) == signature, name


def test_stages_are_named_after_their_operator():
    x = tg.placeholder((2, 4), name="x")
    i = tg.placeholder((3,), dtype="int32", name="i")
    built = {"add": ops.add(x, 1.0), "transpose": ops.transpose(x), "pad": ops.pad(x, 1),
             "take": ops.take(x, i, axis=1), "sum": ops.sum(x), "matmul": ops.matmul(x, ops.
                                                                                    transpose(x)),
             "argmax": ops.argmax(x, axis=0), "variance": ops.variance(x)}
    for name, t in built.items():
        assert t.name == name
    assert "variance_mean[" in tg.format(built["variance"])
    assert "argmax_max[" in tg.format(built["argmax"])
