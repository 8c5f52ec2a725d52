"""The calls zero elimination makes, end to end, on typical gradient domains.

Their solve times are measured by ``benchmarks/zero_elimination.py``, not here.
"""

import pytest

from tegrad.solver import Affine, Domain, eq, simplify_domain, variable_bounds

V = Affine.var


def conv2d_input_grad(stride, dilation, pad, N=8, O=64, H=56, W=56, K=3):
    n, y, x, ry, rx = V("n"), V("y"), V("x"), V("ry"), V("rx")
    return Domain([("n", 0, N), ("o", 0, O), ("y", 0, H), ("x", 0, W), ("ry", 0, K), ("rx", 0, K)],
                  [eq(n, V("n'")), eq(y * stride + ry * dilation - pad, V("p")),
                   eq(x * stride + rx * dilation - pad, V("q"))],
                  parameters=["n'", "c'", "p", "q"])


CASES = {
    "conv2d_s2_d2": conv2d_input_grad(2, 2, 1),
    "conv2d_s1_d1": conv2d_input_grad(1, 1, 1),
    "matmul": Domain([("i", 0, 128), ("j", 0, 64), ("k", 0, 32)],
                     [eq(V("j"), V("j'")), eq(V("k"), V("k'"))], parameters=["j'", "k'"]),
    "flatten": Domain([("i", 0, 3 * 32 * 32)],
                      [eq(V("i"), V("c") * 1024 + V("y") * 32 + V("x"))],
                      parameters=["c", "y", "x"]),
    "layout": Domain([("a", 0, 16), ("b", 0, 4)],
                     [eq(V("a"), V("p") // 4), eq(V("b"), V("p") % 4)], parameters=["p"]),
}


def engine_step(domain):
    """What zero elimination does with one summation domain."""
    t = simplify_domain(domain)
    if t.is_empty:
        return None
    return t.old_to_new, variable_bounds(t.new), t.new.parameter_conditions, \
        t.new.variable_conditions


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_step_solves_every_case(name):
    old_to_new, bounds, _, _ = engine_step(CASES[name])
    domain = CASES[name]
    # every old variable is rewritten over the new ones and the parameters
    assert set(old_to_new) == set(domain.names)
    for expr in old_to_new.values():
        assert expr.variables() <= set(bounds) | set(domain.parameters)


def test_conv2d_engine_result_shape():
    old_to_new, bounds, pconds, vconds = engine_step(CASES["conv2d_s2_d2"])
    assert set(bounds) == {"o", "y", "x"}
    assert len(bounds["y"].lower) == 2 and len(bounds["y"].upper) == 2  # non-rectangular
    assert bounds["o"].extent == Affine.const(64)
    assert any("% 2 == 0" in str(c) for c in pconds)
    assert str(old_to_new["ry"]) == "-y + (p + 1) // 2"


def test_matmul_and_flatten_results():
    old_to_new, bounds, pconds, _ = engine_step(CASES["matmul"])
    assert set(bounds) == {"i"} and bounds["i"].extent == Affine.const(128)
    assert old_to_new["j"] == V("j'")
    old_to_new, bounds, pconds, vconds = engine_step(CASES["flatten"])
    assert bounds == {} and vconds == ()
    assert str(old_to_new["i"]) == "1024*c + x + 32*y"
    old_to_new, bounds, _, _ = engine_step(CASES["layout"])
    assert bounds == {} and old_to_new == {"a": V("p") // 4, "b": V("p") % 4}
