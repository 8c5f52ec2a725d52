"""Random programs and their optimised gradients, lowered and run by the loop-IR
interpreter, equal ``tg.evaluate`` (the programs of the compiled random-program test;
this checks lowering without LLVM), and the points the loops visit equal ``tg.cost``'s
``iterations`` (plus the scatters' fills, as in ``test_lower_operators.py``).

Where a reduction's loops sit under a condition that reads data (a select on a loaded
value holding the reduction), the lowering runs them only where the condition holds,
which a count made without the data cannot know: ``tg.cost`` counts them as if it held,
so there the points visited are at most the count, and equal to it once every such
condition is taken as true (:func:`open_data_guards`). A loop by a step above one may
visit the points of two pieces of a domain per iteration (``i`` and ``i + 1``): the
count is then at most ``tg.cost``'s.
"""
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import StmtMapper, walk_expr, walk_stmts
from tegrad.codegen.loops.nodes import For, If, Kernel, Let, Load
from tegrad.codegen.lower.program import lower_program, prepare

from support.compiled_programs import programs, with_gradient
from support.programs import scatter_fill


def _is_data_guard(s):
    """An if on loaded data around loops (a reduction run only where data says)."""
    return (type(s) is If and s.otherwise is None
            and any(type(n) is Load for n in walk_expr(s.cond))
            and any(type(n) in (For, Let) for n in walk_stmts(s.then)))


def _data_guards(kernel):
    return [s for s in walk_stmts(kernel.body) if _is_data_guard(s)]


class _OpenDataGuards(StmtMapper):
    def map_if(self, s):
        s = super().map_if(s)
        return s.then if _is_data_guard(s) else s

    def map_check(self, s):
        return None  # the opened loops may index where the guard kept them from


def open_data_guards(kernel):
    """``kernel`` with every data guard around loops taken as true (only its count is
    used: the results of the opened loops are not those of the program)."""
    return Kernel(kernel.name, kernel.args, kernel.temps, _OpenDataGuards()(kernel.body))


def _shifted_pieces(kernel):
    """A loop by a step above one: isl's loop over several residues of a stride."""
    return any(type(s) is For and s.step > 1 for s in walk_stmts(kernel.body))


#: programs per run (each is interpreted in Python); set it higher for a long run
EXAMPLES = int(os.environ.get("TEGRAD_RANDOM_LOWERED", "50"))


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(large=False), st.integers(0, 2**31 - 1))
def test_lowered_random_program_matches_evaluator_and_cost(program, seed):
    inputs, outputs, feed = with_gradient(program, seed)
    kernel = lower_program(inputs, outputs)
    got, iterations = run(kernel, [feed[t] for t in inputs])
    for t, g, w in zip(outputs, got, tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=t.name)
    prepared = prepare(outputs)
    counted = tg.cost(prepared).iterations + scatter_fill(inputs, prepared)
    if not _data_guards(kernel):
        # isl may visit two pieces of a domain in one loop iteration (the even points at
        # ``i`` and the odd ones at ``i + 1`` of a loop by 2), which counts as one
        assert iterations <= counted
        assert iterations == counted or _shifted_pieces(kernel)
    else:
        assert iterations <= counted
        _, opened = run(open_data_guards(kernel), [feed[t] for t in inputs])
        assert opened == counted


def test_a_condition_of_outer_values_is_tested_around_loops_without_affine_bounds():
    # the gradient of a read at (-2 i - 2 j) % 4: a sum over j and t (t's bounds need
    # floor divisions, so its loops come straight from them) under i0 * 3 % 2 == 0,
    # which names neither: tested once around the loops, the points visited are those
    # the cost counts
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    s1 = tg.compute((3, 4), lambda i, j: x[(i * -2 + j * -2) % 4, (i * -2 + 2) % 3], name="s1")
    head = tg.placeholder((3, 4), dtype="float64", name="head")
    r = [tg.reduce_axis((0, 3)), tg.reduce_axis((0, 4))]
    loss = tg.compute((), lambda: tg.sum(s1[r[0], r[1]] * head[r[0], r[1]], axis=r),
                      name="loss")
    dx, = tg.differentiate(loss, [x])
    kernel = lower_program([x, head], [dx])
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape) for t in (x, head)]
    got, iterations = run(kernel, arrays)
    np.testing.assert_allclose(got[0], tg.evaluate([dx], dict(zip((x, head), arrays)))[0],
                               rtol=1e-12, atol=1e-12)
    assert iterations <= tg.cost(prepare([dx])).iterations
    loops = [s for s in walk_stmts(kernel.body) if type(s) is For]
    assert not any(type(s) is If for loop in loops[2:] for s in walk_stmts(loop.body)), \
        "the condition is tested inside the reduction's loops"
