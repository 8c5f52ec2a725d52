"""strided_slice, slice_like, split and pad against Python slicing and numpy.pad."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import tegrad as tg
from tegrad import ops

SLICES = [
    ((5, 4), [1, 0], [4, 3], None),
    ((5, 4), [4], [0], [-2]),                       # negative stride, begin > end
    ((7,), [-2], [-8], [-1]),                        # negative begin, end before the start
    ((6, 5, 3), [None, -4, 1], [None, 100, None], [2, 1, -1]),
    ((4, 3), [10], [None], [-3]),                    # begin past the end, clamped
    ((3, 5), [0, -100], [3, -1], [1, 2]),
]


@pytest.mark.parametrize("shape,begin,end,strides", SLICES)
def test_strided_slice(shape, begin, end, strides, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x: ops.strided_slice(x, begin=begin, end=end, strides=strides), a)
    steps = strides or [None] * len(begin)
    expected = a[tuple(slice(b, e, s) for b, e, s in zip(begin, end, steps))]
    np.testing.assert_array_equal(out, expected)


def test_strided_slice_errors():
    x = tg.placeholder((5, 4), name="x")
    with pytest.raises(tg.ShapeError, match=r"^strided_slice: the slice 3:1:1 of dimension 0 of "
                                            r"tensor 'x' of shape \(5, 4\) is empty"):
        ops.strided_slice(x, [3], [1])
    with pytest.raises(tg.TegradError, match=r"^strided_slice: strides entry 1 is 0"):
        ops.strided_slice(x, [0, 0], [5, 4], [1, 0])
    with pytest.raises(tg.ShapeError, match=r"^strided_slice: begin \(0, 0, 0\) has 3 entries for "
                                            r"a tensor of 2 dimension"):
        ops.strided_slice(x, [0, 0, 0], [1])
    with pytest.raises(tg.TegradError, match=r"^strided_slice: end entry must be an integer, got "
                                            r"1.5"):
        ops.strided_slice(x, [0], [1.5])
    with pytest.raises(tg.TegradError, match=r"^strided_slice: x must be a tegrad Tensor"):
        ops.strided_slice(np.zeros(3), [0], [1])


@pytest.mark.parametrize("shape,like,axes", [((5, 4, 3), (2, 3), None), ((5, 4), (3, 2, 7), [-1]),
                                             ((4, 4), (4, 1), (0, 1)), ((6,), (6, 2), None)])
def test_slice_like(shape, like, axes, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x, y: ops.slice_like(x, shape_like=y, axes=axes), a, np.zeros(like))
    cut = range(min(len(shape), len(like))) if axes is None else [d % len(shape) for d in axes]
    expected = a[tuple(slice(0, like[d]) if d in cut else slice(None) for d in range(a.ndim))]
    np.testing.assert_array_equal(out, expected)


def test_slice_like_accepts_a_shape(rng, run):
    a = rng.normal(size=(3, 3))
    np.testing.assert_array_equal(run(lambda x: ops.slice_like(x, (2, 1)), a), a[:2, :1])


def test_slice_like_errors():
    x = tg.placeholder((3, 4), name="x")
    big = tg.placeholder((2, 5), name="big")
    with pytest.raises(tg.ShapeError, match=r"^slice_like: dimension 1 of tensor 'x' of shape "
                                            r"\(3, 4\) cannot be sliced to extent 5"):
        ops.slice_like(x, big)
    with pytest.raises(tg.ShapeError, match=r"^slice_like: axis 1 of tensor 'x' has no counterpart "
                                            r"in shape_like \(2,\)"):
        ops.slice_like(x, (2,), axes=[1])
    with pytest.raises(tg.ShapeError, match=r"^slice_like: axes entry 2 is out of range for "
                                            r"tensor 'x'"):
        ops.slice_like(x, big, axes=[2])
    with pytest.raises(tg.TegradError, match=r"^slice_like: shape_like must be an integer or a "
                                             r"sequence"):
        ops.slice_like(x, "ab")


@pytest.mark.parametrize("shape,spec,axis", [((6, 2), 3, 0), ((2, 7), [2, 3, 6], -1),
                                             ((3, 5, 2), [1], 1), ((4,), 1, 0)])
def test_split(shape, spec, axis, rng, run):
    a = rng.normal(size=shape)
    pieces = run(lambda x: ops.split(x, indices_or_sections=spec, axis=axis), a)
    assert isinstance(pieces, list)
    extent = shape[axis]
    cuts = [extent // spec * k for k in range(spec + 1)] if isinstance(spec, int) else \
        [0] + list(spec) + [extent]
    assert len(pieces) == len(cuts) - 1
    for got, lo, hi in zip(pieces, cuts, cuts[1:]):
        index = [slice(None)] * a.ndim
        index[axis] = slice(lo, hi)
        np.testing.assert_array_equal(got, a[tuple(index)])


def test_split_errors():
    x = tg.placeholder((5, 4), name="x")
    with pytest.raises(tg.ShapeError, match=r"^split: dimension 0 of tensor 'x' of shape \(5, 4\) "
                                            r"\(extent 5\) cannot be split into 2 equal sections"):
        ops.split(x, 2)
    with pytest.raises(tg.ShapeError, match=r"^split: indices_or_sections \(3, 2\) must increase "
                                            r"strictly inside \(0, 4\).*tensor 'x'"):
        ops.split(x, [3, 2], axis=1)
    with pytest.raises(tg.ShapeError, match=r"^split: indices_or_sections \(0, 2\) must increase"):
        ops.split(x, [0, 2])
    with pytest.raises(tg.TegradError, match=r"^split: indices_or_sections must be positive"):
        ops.split(x, 0)
    with pytest.raises(tg.ShapeError, match=r"^split: axis -3 is out of range for tensor 'x'"):
        ops.split(x, 1, axis=-3)


PADS = [
    ((3, 4), 1, "constant", 0.0),
    ((3, 4), ((5, 0), (2, 7)), "constant", -1.5),    # wider than the input
    ((2, 3), ((0, 0), (1, 2)), "edge", 0),
    ((1, 4), ((3, 1), (4, 5)), "edge", 0),
    ((4, 5), ((3, 3), (1, 2)), "reflect", 0),        # at most n - 1: one reflection
    ((3, 2), ((7, 6), (4, 3)), "reflect", 0),        # wider: repeated reflection
    ((1, 3), (2, 3), "reflect", 0),                  # extent 1 repeats its element
    ((5,), [(2, 0)], "constant", 9.0),
    ((3, 4), ((1, 2),), "constant", 0.0),           # one pair for every axis
    ((2, 2), (0, 3), "edge", 0),
]


@pytest.mark.parametrize("shape,pad_width,mode,value", PADS)
def test_pad(shape, pad_width, mode, value, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x: ops.pad(x, pad_width=pad_width, mode=mode, value=value), a)
    if mode == "constant":
        expected = np.pad(a, pad_width, mode="constant", constant_values=value)
    else:
        expected = np.pad(a, pad_width, mode=mode)
    np.testing.assert_array_equal(out, expected)


def test_pad_integers(run):
    a = np.arange(6, dtype="int32").reshape(2, 3)
    out = run(lambda x: ops.pad(x, ((1, 0), (0, 2)), value=-1), a)
    np.testing.assert_array_equal(out, [[-1, -1, -1, -1, -1], [0, 1, 2, -1, -1],
                                        [3, 4, 5, -1, -1]])


def test_pad_errors():
    x = tg.placeholder((3, 4), name="x")
    with pytest.raises(tg.ShapeError, match=r"^pad: pad_width has 3 pairs for a tensor of 2 "):
        ops.pad(x, ((1, 1), (1, 1), (1, 1)))
    with pytest.raises(tg.TegradError, match=r"^pad: pad_width entry must be non-negative, got -1"):
        ops.pad(x, ((1, -1), (0, 0)))
    with pytest.raises(tg.TegradError, match=r"^pad: mode 'wrap' is not one of constant, edge, "):
        ops.pad(x, 1, mode="wrap")
    with pytest.raises(tg.TegradError, match=r"^pad: pad_width must be an int, a "
                                             r"\(before, after\)"):
        ops.pad(x, "1")
    with pytest.raises(tg.TegradError, match=r"^pad: value must be a number, got 'z'"):
        ops.pad(x, 1, value="z")
    n = tg.placeholder((3,), dtype="int32", name="n")
    with pytest.raises(tg.DTypeError, match=r"^pad: the float 0.5 is not a valid int32 constant"):
        ops.pad(n, 1, value=0.5)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_strided_slice_matches_python_slicing(data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))
    bound = st.one_of(st.none(), st.integers(-7, 7))
    begin, end, strides = [], [], []
    for extent in shape:
        step = data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        b, e = data.draw(bound), data.draw(bound)
        assume(len(range(*slice(b, e, step).indices(extent))) > 0)
        begin.append(b)
        end.append(e)
        strides.append(step)
    a = np.arange(int(np.prod(shape)), dtype="int32").reshape(shape)
    x = tg.placeholder(shape, dtype="int32", name="x")
    out = tg.evaluate(ops.strided_slice(x, begin, end, strides), {x: a})
    np.testing.assert_array_equal(out, a[tuple(map(slice, begin, end, strides))])
