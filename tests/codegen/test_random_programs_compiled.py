"""Random programs compiled with ``tegrad.codegen.build`` equal ``tg.evaluate``.

The stages come from the random-program generators of zero elimination's tests (affine,
floor-division and modulo indices, guarded reads), extended with what lowering must
handle: every reducer (sum, prod, max, min, a ``comm_reducer``) with ``init``,
non-rectangular reduction domains (triangular ``where``, bounds that move with the outer
axis, divisibility conditions that become strides) and scatters with data-dependent
targets. Each program is compiled with its zero-eliminated gradient, whose domains
are the non-rectangular ones zero elimination produces.

Each program costs a fraction of a second (differentiation and LLVM), so a CI run
draws ``TEGRAD_RANDOM_PROGRAMS`` programs (default 200); set it higher for a long run.
"""
import importlib.util
import os
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen import build
from tegrad.codegen.llvm import emit as emit_module
from tegrad.ir.errors import DifferentiationError

F64 = "float64"


def _generators():
    path = pathlib.Path(__file__).parents[1] / "zero_elim" / "test_random_programs.py"
    spec = importlib.util.spec_from_file_location("_zero_elim_random_programs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generators()

ABSMAX = tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)), lambda dtype: 0.0,
                         name="absmax")
REDUCERS = {"sum": tg.sum, "prod": tg.prod, "max": tg.max, "min": tg.min, "absmax": ABSMAX}
DOMAINS = ["box", "triangular", "moving", "stride", "stride_sum"]


def _reduction(draw, inputs, s, shape):
    reducer = draw(st.sampled_from(sorted(REDUCERS)))
    domain = draw(st.sampled_from(DOMAINS))
    extent = draw(st.integers(1, 5))
    step = draw(st.integers(2, 3))
    use_init = draw(st.booleans())

    def fcompute(i, j):
        if domain == "moving":
            k = tg.reduce_axis((i, i + extent), name=f"k{s}")
            size = shape[0] + extent
        else:
            k = tg.reduce_axis((0, extent), name=f"k{s}")
            size = extent
        where = {"box": None, "moving": None, "triangular": k <= i,
                 "stride": k % step == j % step,
                 "stride_sum": (k + i * 2) % step == 0}[domain]
        body = GEN._body(GEN._Draw(draw), inputs, [(i, shape[0]), (j, shape[1]), (k, size)], WRAPS)
        if reducer == "prod":
            body = tg.tanh(body) * 0.5 + 1.0  # bounded factors
        init = inputs[0][0, 0] if use_init else None
        return REDUCERS[reducer](body, axis=k, where=where, init=init)

    return fcompute


#: how a stage body may end (see the generator's ``_body``)
WRAPS = ("none", "tanh", "exp", "select")

@st.composite
def programs(draw):
    x = tg.placeholder((draw(st.integers(2, 5)), draw(st.integers(2, 5))), dtype=F64, name="x")
    inputs, stages = [x], []
    for s in range(draw(st.integers(1, 2))):
        shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        kind = draw(st.sampled_from(["elementwise", "reduce", "reduce", "scatter"]))
        if kind == "elementwise":
            t = tg.compute(shape, lambda i, j, shape=shape: GEN._body(
                GEN._Draw(draw), inputs, [(i, shape[0]), (j, shape[1])], WRAPS), name=f"s{s}")
        elif kind == "reduce":
            t = tg.compute(shape, _reduction(draw, inputs, s, shape), name=f"s{s}")
        else:
            src = draw(st.sampled_from(inputs))
            n = draw(st.integers(1, 4))
            index = tg.compute(src.shape, lambda a, b, n=n: tg.cast(
                tg.floor(tg.abs(x[a % x.shape[0], b % x.shape[1]]) * 3.0), "int32") % n,
                name=f"idx{s}")
            t = tg.scatter_add((n, src.shape[1]), src.shape,
                               lambda a, b, index=index: (index[a, b], b),
                               lambda a, b, src=src: src[a, b] * 2.0,
                               init=None if not draw(st.booleans()) else
                               tg.compute((n, src.shape[1]), lambda a, b: x[a % x.shape[0],
                                                                           b % x.shape[1]],
                                          name=f"init{s}"),
                               name=f"s{s}")
        inputs.append(t)
        stages.append(t)
    return x, stages[-1]


def with_gradient(program, seed):
    """``(inputs, outputs, feed)``: a random program's output and, when it has one, its
    gradient for a random head, with random values for the inputs."""
    x, out = program
    rng = np.random.default_rng(seed)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    feed = {x: rng.standard_normal(x.shape), head: rng.standard_normal(out.shape)}
    outputs = [out]
    try:
        outputs += list(tg.differentiate(out, [x], head=head))
    except DifferentiationError:
        pass
    return ([x, head] if len(outputs) > 1 else [x]), outputs, feed


EXAMPLES = int(os.environ.get("TEGRAD_RANDOM_PROGRAMS", "200"))


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_compiled_random_program_and_gradient_equal_evaluator(program, seed):
    inputs, outputs, feed = with_gradient(program, seed)
    got = build(inputs, outputs)(*[feed[t] for t in inputs])
    want = tg.evaluate(outputs, feed)
    for t, g, w in zip(outputs, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{t.name}:\n{tg.format(outputs)}")


@settings(max_examples=15, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_emitted_one_function_per_statement_equal_evaluator(program, seed):
    """The emission of large kernels in parts (here every top-level statement a part)."""
    inputs, outputs, feed = with_gradient(program, seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit_module, "PART_SIZE", 1)
        got = build(inputs, outputs, name="in_parts")(*[feed[t] for t in inputs])
    want = tg.evaluate(outputs, feed)
    for t, g, w in zip(outputs, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{t.name}:\n{tg.format(outputs)}")
