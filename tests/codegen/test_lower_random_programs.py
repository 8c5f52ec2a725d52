"""Random programs and their optimised gradients, lowered and run by the loop-IR
interpreter, equal ``tg.evaluate`` (the programs of the compiled random-program test;
this checks lowering without LLVM).

The points visited are not compared with ``tg.cost`` here: on random programs the cost
model leaves out reductions inside conditions, and a scatter whose targets have
different affine conditions is visited in one loop per piece of the domain (isl
separates them) where the cost model counts one pass over their union. The operator
library's programs are compared (``test_lower_operators.py``).
"""
import importlib.util
import pathlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.errors import DifferentiationError
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.lower.program import lower_program


def _programs():
    path = pathlib.Path(__file__).parent / "test_random_programs_compiled.py"
    spec = importlib.util.spec_from_file_location("_compiled_random_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.programs


@settings(max_examples=50, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_programs()(), st.integers(0, 2**31 - 1))
def test_lowered_random_program_matches_evaluator(program, seed):
    x, out = program
    rng = np.random.default_rng(seed)
    head = tg.placeholder(out.shape, dtype="float64", name="head")
    feed = {x: rng.standard_normal(x.shape), head: rng.standard_normal(out.shape)}
    outputs = [out]
    try:
        outputs += list(tg.differentiate(out, [x], head=head))
    except DifferentiationError:
        pass
    inputs = [x, head] if len(outputs) > 1 else [x]
    kernel = lower_program(inputs, outputs)
    got, _ = run(kernel, [feed[t] for t in inputs])
    for t, g, w in zip(outputs, got, tg.evaluate(outputs, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=t.name)
