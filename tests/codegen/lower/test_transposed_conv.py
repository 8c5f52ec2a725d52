"""The transposed convolution as the operator library writes it (a sum masked by
residues of the stride) runs on the gemm kernel, one product per residue class of the
output position: results against tg.evaluate, the masked form's rewrite
(codegen.lower.residues) and the reboxed reduction (a range from a term of its lower
bound)."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.lower.product_plans import constant_bounds, detect_contraction
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct
from tegrad.codegen.lower.residues import drop_residue_masks

from support.compare import check_build, feed_of


def products(f):
    return [s for s in walk_stmts(f.kernel.body) if type(s) is MatrixProduct]


@pytest.mark.parametrize("stride, padding, output_padding, dilation", [
    (2, 1, 1, 1), (2, 0, 0, 1), (3, 1, 2, 1), (2, 2, 1, 2), (1, 1, 0, 1), (2, 1, 0, 3)])
def test_transposed_conv_step_runs_as_products(stride, padding, output_padding, dilation):
    x = tg.placeholder((2, 6, 7, 5), name="x")
    w = tg.placeholder((6, 4, 3, 3), name="w")
    y = nn.conv2d_transpose(x, w, stride=stride, padding=padding,
                            output_padding=output_padding, dilation=dilation)
    h = tg.placeholder(y.shape, name="h")
    grads = tg.differentiate(ops.sum(ops.multiply(y, h)), [x, w])
    f = check_build([x, w, h], [y, *grads], feed_of([x, w, h], seed=stride), rtol=1e-4)
    assert products(f)
    if dilation % stride == 1 and dilation > 1:
        return  # taps on a lattice of their own: loops (still equal to the evaluator)
    # the forward as products: every product's operands are the inputs or their padded
    # copies, none larger than the image
    forward = [p for p in products(f) if p.c.name.startswith("conv2d_transpose")]
    assert forward, f.schedule
    for p in products(f):
        for b in (p.a, p.b):
            assert np.prod(b.shape) <= 4 * max(np.prod(t.shape) for t in (x, w, h)), b


def test_the_masked_sum_becomes_a_sum_over_the_input_positions():
    x = tg.placeholder((1, 2, 4, 4), name="x")
    w = tg.placeholder((2, 3, 3, 3), name="w")
    y = nn.conv2d_transpose(x, w, stride=2, padding=1, output_padding=1)
    (z,) = drop_residue_masks([y])
    assert "%" in str(y.op.body) and "%" not in str(z.op.body)
    a, b = feed_of([x, w], seed=5)
    want, got = tg.evaluate([y, z], {x: a, w: b})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # a stage without residue masks is kept as it is
    plain = nn.conv2d(x, tg.placeholder((3, 2, 3, 3), name="v"), padding=1)
    assert drop_residue_masks([plain])[0] is plain


def test_a_range_from_a_lower_bound_term_is_reboxed_to_its_width():
    # out[i] = sum(x[q] * w[i - 2 q + 1], q in [max(0, i - 1), min(8, i + 1))) over the
    # class i = 2 o + 1: q from o, two values (not the 8 of q itself)
    x = tg.placeholder((8,), dtype="float64", name="x")
    w = tg.placeholder((4,), dtype="float64", name="w")
    q = tg.reduce_axis((0, 8), name="q")
    hi = tg.compute((8,), lambda o: tg.sum(x[q] * w[2 * o + 1 - 2 * q + 1], axis=q,
                                            where=tg.all(q >= o, q < o + 2, 2 * o + 2 - 2 * q < 4,
                                                         2 * o + 2 - 2 * q >= 0)), name="hi")
    from tegrad.zero_elim.stage import optimize_stage
    opt = optimize_stage(hi)
    body = opt.op.body
    r = constant_bounds(body, {"o": 8})
    assert r is not None and [ax.extent.value for ax in r.axes] == [2], body
    c = detect_contraction(opt)
    assert c is not None
    a, b = feed_of([x, w], seed=6)
    f = tg.build([x, w], [opt])
    np.testing.assert_allclose(f(a, b)[0], tg.evaluate(hi, {x: a, w: b}), rtol=1e-12)
