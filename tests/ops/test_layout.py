"""layout_transform against reshape/transpose formulations in numpy."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import ops


def nchw_to_nchwc(a, c):
    """Pad the channels to a multiple of c with zeros, split them, move the block last."""
    n, ch, h, w = a.shape
    blocks = -(-ch // c)
    padded = np.zeros((n, blocks * c, h, w), dtype=a.dtype)
    padded[:, :ch] = a
    return padded.reshape(n, blocks, c, h, w).transpose(0, 1, 3, 4, 2)


def nchwc_to_nchw(a):
    n, blocks, h, w, c = a.shape
    return a.transpose(0, 1, 4, 2, 3).reshape(n, blocks * c, h, w)


CASES = [
    ("NCHW", "NCHW4c", (2, 8, 3, 1), lambda a: nchw_to_nchwc(a, 4)),
    ("NCHW4c", "NCHW", (1, 3, 2, 3, 4), nchwc_to_nchw),
    ("NCHW", "NHWC", (2, 3, 4, 5), lambda a: a.transpose(0, 2, 3, 1)),
    ("NHWC", "NCHW", (1, 2, 3, 5), lambda a: a.transpose(0, 3, 1, 2)),
    ("NCHW", "NCHW4c", (1, 6, 2, 2), lambda a: nchw_to_nchwc(a, 4)),       # padded to 8
    ("NCHW4c", "NCHW8c", (1, 3, 2, 2, 4), lambda a: nchw_to_nchwc(nchwc_to_nchw(a), 8)),
    ("NCHW2c", "NHWC", (1, 3, 2, 3, 2), lambda a: nchwc_to_nchw(a).transpose(0, 2, 3, 1)),
    ("OIHW", "OIHW2i4o", (8, 4, 1, 3),
     lambda a: a.reshape(2, 4, 2, 2, 1, 3).transpose(0, 2, 4, 5, 3, 1)),
]


@pytest.mark.parametrize("src,dst,shape,ref", CASES, ids=[f"{c[0]}->{c[1]}" for c in CASES])
def test_layout_transform(src, dst, shape, ref, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x: ops.layout_transform(x, src_layout=src, dst_layout=dst), a)
    np.testing.assert_array_equal(out, ref(a))


def test_layout_round_trip_and_index_arithmetic(rng, run):
    a = rng.integers(0, 100, size=(2, 8, 3, 3)).astype("int32")
    back = run(lambda x: ops.layout_transform(ops.layout_transform(x, "NCHW", "NCHW4c"),
                                              "NCHW4c", "NCHW"), a)
    np.testing.assert_array_equal(back, a)
    x = tg.placeholder((1, 2, 2, 2, 4), name="x")
    last = tg.format(ops.layout_transform(x, "NCHW4c", "NCHW")).splitlines()[-1]
    assert last == "layout_transform[ax0, ax1, ax2, ax3] = x[ax0, ax1 // 4, ax2, ax3, ax1 % 4]"


def test_layout_transform_errors():
    x = tg.placeholder((1, 8, 2, 2), name="x")
    with pytest.raises(tg.ShapeError, match=r"^layout_transform: src_layout 'NCH' has 3 axes but "
                                            r"tensor 'x' has shape \(1, 8, 2, 2\)"):
        ops.layout_transform(x, "NCH", "NHC")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: src_layout 'NCHW' and "
                                             r"dst_layout 'NCHD' do not have the same primal"):
        ops.layout_transform(x, "NCHW", "NCHD")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: dst_layout 'NCHW4c4c' names the "
                                             r"axis 'c' twice"):
        ops.layout_transform(x, "NCHW", "NCHW4c4c")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: dst_layout 'NCHW4' is not a "
                                             r"layout"):
        ops.layout_transform(x, "NCHW", "NCHW4")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: dst_layout 'NCHWc': the sub-axis "
                                             r"'c' needs a positive extent"):
        ops.layout_transform(x, "NCHW", "NCHWc")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: dst_layout 'NHW4c': the sub-axis "
                                             r"'c' has no primal axis 'C'"):
        ops.layout_transform(tg.placeholder((1, 2, 2), name="y"), "NHW", "NHW4c")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: src_layout 'N4CHW': the primal "
                                             r"axis 'C' cannot have an extent"):
        ops.layout_transform(x, "N4CHW", "NCHW")
    with pytest.raises(tg.TegradError, match=r"^layout_transform: src_layout must be a non-empty "):
        ops.layout_transform(x, "", "NCHW")
    z = tg.placeholder((1, 2, 2, 2, 3), name="z")
    with pytest.raises(tg.ShapeError, match=r"^layout_transform: dimension 4 of tensor 'z' of "
                                            r"shape \(1, 2, 2, 2, 3\) is the sub-axis 4c of "
                                            r"'NCHW4c'"):
        ops.layout_transform(z, "NCHW4c", "NCHW")
