"""A build requests its products' shared routines before it lowers the program: which
dtypes the program's products compute in (``product_dtypes``, found in the program as
written) against the products the lowered kernel holds, over random layers; and the
order of the requests against the lowering's."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct
from tegrad.codegen.lower import program as lower_program_module
from tegrad.codegen.lower.program import lower_program, product_dtypes
from tegrad.codegen.runtime import builder


@st.composite
def layered_programs(draw):
    """``(inputs, outputs)``: one to three layers of drawn dtypes and sizes (dense,
    conv2d, a sum over an axis, tanh), maybe differentiated."""
    inputs, outputs = [], []
    for k in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from(["float32", "float64"]))
        kind = draw(st.sampled_from(["dense", "conv2d", "sum", "tanh"]))
        if kind == "dense":
            m, i, o = (draw(st.sampled_from([1, 3, 16, 40, 130])) for _ in range(3))
            x = tg.placeholder((m, i), dtype=dtype, name=f"x{k}")
            w = tg.placeholder((o, i), dtype=dtype, name=f"w{k}")
            y, params = nn.dense(x, w), [x, w]
        elif kind == "conv2d":
            c, f, hw = (draw(st.sampled_from(v)) for v in ([1, 3, 8], [1, 4, 16], [3, 6, 12]))
            x = tg.placeholder((2, c, hw, hw), dtype=dtype, name=f"x{k}")
            w = tg.placeholder((f, c, 3, 3), dtype=dtype, name=f"w{k}")
            y, params = nn.conv2d(x, w, padding=draw(st.sampled_from([0, 1]))), [x, w]
        else:
            x = tg.placeholder((draw(st.sampled_from([4, 64])), 50), dtype=dtype,
                               name=f"x{k}")
            y = tg.ops.tanh(x) if kind == "tanh" else tg.ops.sum(x, axis=1)
            params = [x]
        inputs.extend(params)
        outputs.append(y)
        if draw(st.booleans()):
            head = tg.placeholder(y.shape, dtype=dtype, name=f"head{k}")
            inputs.append(head)
            loss = tg.ops.sum(tg.ops.multiply(y, head))
            outputs.extend(tg.differentiate(loss, params))
    return inputs, outputs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layered_programs())
def test_product_dtypes_are_those_of_the_lowered_kernels_products(case):
    inputs, outputs = case
    kernel = lower_program(inputs, outputs, contractions=True)
    lowered = {s.spec.dtype for s in walk_stmts(kernel.body) if type(s) is MatrixProduct}
    found = product_dtypes(outputs)
    assert len(found) == len(set(found)) and set(found) == lowered


def test_a_build_requests_its_products_routines_before_lowering(monkeypatch):
    events = []
    lower = lower_program_module.lower_program

    def lowering(*args, **kwargs):
        events.append("lower")
        return lower(*args, **kwargs)
    monkeypatch.setattr("tegrad.codegen.pipeline.lower_program", lowering)
    monkeypatch.setattr(builder, "request_shared_routines",
                        lambda dtype: events.append(("request", dtype)))
    x = tg.placeholder((96, 80), dtype="float64", name="x")
    w = tg.placeholder((72, 80), dtype="float64", name="w")
    y = nn.dense(x, w)
    f = tg.build([x, w], [tg.ops.tanh(y)], threads=1, name=f"early{id(events)}")
    assert events[:2] == [("request", "float64"), "lower"]
    a, b = np.random.default_rng(0).standard_normal((2, 96, 80))
    np.testing.assert_allclose(f(a, b[:72])[0], np.tanh(a @ b[:72].T), rtol=1e-12)
    # a program with no product requests nothing; schedule="none" neither
    events.clear()
    tg.build([x], [tg.ops.tanh(x)], threads=1, name=f"early_none{id(events)}")
    tg.build([x, w], [y], threads=1, schedule="none", name=f"early_plain{id(events)}")
    assert ("request", "float64") not in events


def test_differentiate_requests_the_products_routines_before_deriving(monkeypatch):
    """``tg.differentiate`` asks for the routines of the forward program's product
    dtypes before it derives anything (a build of the gradients then finds them
    compiled); a program with no product, or an argument that is not one, asks for
    none, and the differentiation reports the bad argument as before."""
    events = []
    derive = tg.autodiff.differentiate

    def deriving(*args, **kwargs):
        events.append("derive")
        return derive(*args, **kwargs)
    monkeypatch.setattr(tg.pipeline.autodiff, "differentiate", deriving)
    monkeypatch.setattr(builder, "request_shared_routines",
                        lambda dtype: events.append(("request", dtype)))
    x = tg.placeholder((48, 40), dtype="float32", name="x")
    w = tg.placeholder((24, 40), dtype="float32", name="w")
    head = tg.placeholder((48, 24), dtype="float32", name="head")
    loss = tg.ops.sum(tg.ops.multiply(tg.ops.tanh(nn.dense(x, w)), head))
    grads = tg.differentiate(loss, [w])
    assert events == [("request", "float32"), "derive"]
    feed = np.random.default_rng(1).standard_normal((3, 48, 40)).astype("float32")
    args = [feed[0], feed[1][:24], feed[2][:, :24]]
    got = tg.build([x, w, head], list(grads), threads=1)(*args)[0]
    want = tg.evaluate(grads[0], dict(zip([x, w, head], args)))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    events.clear()
    tg.differentiate(tg.ops.sum(tg.ops.tanh(x)), [x])
    with pytest.raises(tg.TegradError):
        tg.differentiate("not a tensor", [x])
    assert ("request", "float32") not in events
