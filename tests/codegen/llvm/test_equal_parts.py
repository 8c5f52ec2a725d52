"""Equal blocks of a large kernel run as one function: the emitted module defines it once
and calls it on each block's buffers; the results are the evaluator's, and a part that
may report an error naming its own tensors keeps its own function."""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.codegen.llvm import emit
from tegrad.codegen.llvm.equal_parts import part_key


def _stack(layers, n, d, table=None):
    """``layers`` equal dense + layer-norm + GELU blocks, each with its own weights;
    with ``table``, the input is an embedding of ids (a data-dependent read)."""
    ids = tg.placeholder((n,), dtype="int32", name="ids")
    x = tg.placeholder((n, d), name="x") if table is None else nn.embedding(table, ids)
    params, h = [], x
    for k in range(layers):
        w = tg.placeholder((d, d), name=f"w{k}")
        g, b = tg.placeholder((d,), name=f"g{k}"), tg.placeholder((d,), name=f"b{k}")
        params += [w, g, b]
        h = h + nn.gelu(nn.layer_norm(nn.dense(h, w), g, b))
    return ids, x, params, h


def _defined_parts(ir_text):
    return set(re.findall(r'define internal i32 @"[^"]*\.(part\d+)"', ir_text))


def _called_parts(ir_text):
    return re.findall(r'call i32 @"[^"]*\.(part\d+)"', ir_text)


@settings(max_examples=3, deadline=None)
@given(st.integers(2, 3), st.integers(3, 9), st.integers(2, 5))
def test_equal_blocks_share_their_functions(layers, n, d):
    ids, x, params, h = _stack(layers, n, d)
    rng = np.random.default_rng(n * 10 + d)
    feed = {t: rng.standard_normal(t.shape).astype(np.float32) for t in [x, *params]}
    want = tg.evaluate(h, feed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit, "PART_SIZE", 1)
        # (unscheduled: a stage per statement, so each block's statements are its own)
        f = tg.build([x, *params], [h], threads=1, schedule="none")
        (got,) = f(*(feed[t] for t in [x, *params]))
    calls = _called_parts(f._executable.emitted_ir)
    # each block after the first calls functions an earlier one defined
    defined = _defined_parts(f._executable.emitted_ir)
    assert len(calls) - len(defined) >= layers - 1
    assert len(set(calls)) == len(_defined_parts(f._executable.emitted_ir))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_part_reporting_an_error_keeps_its_function():
    """Two embeddings of ids, each checked against its own table: a bad id reports the
    table it indexes, so the two look-ups are not one function."""
    ids = tg.placeholder((4,), dtype="int32", name="ids")
    t0, t1 = tg.placeholder((5, 3), name="t0"), tg.placeholder((5, 3), name="t1")
    y = nn.embedding(t0, ids) * 2.0 + 1.0
    z = nn.embedding(t1, ids) * 2.0 + 1.0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit, "PART_SIZE", 1)
        f = tg.build([ids, t0, t1], [y, z], threads=1, schedule="none")
    assert len(_defined_parts(f._executable.emitted_ir)) == len(_called_parts(f._executable.emitted_ir))
    table = np.ones((5, 3), np.float32)
    with pytest.raises(tg.OutOfBoundsError, match="ids"):
        f(np.array([0, 1, 7, 2], np.int32), table, table)


def test_keys_tell_apart_what_the_code_depends_on():
    """Shapes, dtypes, constants (0.0 and -0.0) and a buffer read twice are in the key;
    names are not."""
    from tegrad.ir.expr import Const, Var
    from tegrad.codegen.loops.nodes import Buffer, For, Load, Store

    def scale(src, dst, var, c=2.0, shape=(4,), dtype="float32"):
        i = Var(var, "int64")
        return For(i, Const(0, "int64"), Const(shape[0], "int64"),
                   Store(Buffer(dst, shape, dtype), (i,),
                         Load(Buffer(src, shape, dtype), (i,)) + c))
    base = part_key(scale("a", "b", "i"))[0]
    assert part_key(scale("p", "q", "k"))[0] == base
    for other in (scale("a", "b", "i", c=-0.0), scale("a", "b", "i", c=3.0),
                  scale("a", "b", "i", shape=(5,)), scale("a", "b", "i", dtype="float64"),
                  scale("a", "a", "i")):
        assert part_key(other)[0] != base
    assert part_key(scale("a", "b", "i", c=0.0))[0] != part_key(scale("a", "b", "i", c=-0.0))[0]
