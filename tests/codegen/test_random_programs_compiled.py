"""Random programs compiled with ``tegrad.codegen.build`` equal ``tg.evaluate``.

The stages come from the random-program generators of zero elimination's tests (affine,
floor-division and modulo indices, guarded reads), extended with what lowering must
handle: every reducer (sum, prod, max, min, a ``comm_reducer``) with ``init``,
non-rectangular reduction domains (triangular ``where``, bounds that move with the outer
axis, divisibility conditions that become strides) and scatters with data-dependent
targets. Each program is compiled with its zero-eliminated gradient, whose domains
are the non-rectangular ones zero elimination produces.

Reads go through strided, dilated windows ``s*i + d*k - p`` (under their bounds) and
residues ``i // s``, ``i % s`` too; reductions run over one axis or two of independent
extents (non-square windows), and contraction stages sum a product of two such reads
(a matrix product, a convolution) for the product kernels. Half of the programs are
large (stages of 16-48 x 16-48, reductions up to 24 x 5 points), for the gemm and dot
kernels, the vector loops and the parallel loops, built with 1 or 2 threads;
``test_large_random_programs_take_the_product_vector_and_parallel_paths`` checks on
fixed seeds that such programs reach those paths. Programs are built with
``check_bounds=True`` when ``build`` has that option.

Each program costs a fraction of a second (differentiation and LLVM), so a CI run
draws ``TEGRAD_RANDOM_PROGRAMS`` programs (default 200); set it higher for a long run,
with a new seed each time::

    TEGRAD_RANDOM_PROGRAMS=2000 python -m pytest -q \
        tests/codegen/test_random_programs_compiled.py --hypothesis-seed=7
"""
import importlib.util
import inspect
import os
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen import build
from tegrad.codegen.llvm import emit as emit_module
from tegrad.ir.errors import BufferTooLargeError, DifferentiationError

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


def _reduction(c, inputs, s, shape, large):
    """A reduction stage: any reducer, over one axis or two of independent extents (a
    non-square window), on one of the domains of ``DOMAINS``, reading its inputs through
    every index kind, strided and dilated windows and residues included."""
    reducer = c.pick(sorted(REDUCERS))
    domain = c.pick(DOMAINS)
    extent = c.integer(1, 24 if large else 5)
    second = c.integer(1, 5) if c.pick([False, True]) else None
    step = c.integer(2, 3)
    use_init = c.pick([False, True])

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
        variables = [(i, shape[0]), (j, shape[1]), (k, size)]
        axes = [k]
        if second is not None:
            l_axis = tg.reduce_axis((0, second), name=f"l{s}")
            variables.append((l_axis, second))
            axes.append(l_axis)
        body = GEN._body(c, inputs, variables, WRAPS, GEN.WINDOW_KINDS)
        if reducer == "prod":
            body = tg.tanh(body) * 0.5 + 1.0  # bounded factors
        init = inputs[0][0, 0] if use_init else None
        return REDUCERS[reducer](body, axis=axes if second is not None else k, where=where,
                                 init=init)

    return fcompute


def _axis_index(c, main, second, extent, conds):
    """An index along a dimension of ``extent`` led by ``main`` (an axis and its extent):
    the axis itself when it fits and no ``second`` axis is given, half the time, else a
    window ``s*main + d*second - p`` whose bounds conditions go to ``conds`` (the
    reduction's mask, as padding in a convolution)."""
    var, size = main
    if second is None and size <= extent and c.pick([True, False]):
        return var
    index, more = GEN.window_index(c, [main, second], extent)
    conds += more
    return index


def _contraction(c, inputs, s, shape, large):
    """A sum of a product of two reads over one or two reduction axes, what the product
    kernels take, with strides, dilations, padding masks and non-square windows:
    ``gemm``, ``a[i~k, k~l] * b[k~l, j]`` in either order of dimensions; ``conv``,
    ``a[s*i + d*k - p, s'*j + d'*l - p'] * b[k, l]``; ``any``, each index a window of
    any outer and any reduction axis (``~`` is a window of the second axis, sometimes)."""
    a, b = c.pick(inputs), c.pick(inputs)
    extents = [c.integer(1, 24 if large else 5)]
    if c.pick([False, True]):
        extents.append(c.integer(1, 5))
    layout = c.pick(["gemm", "gemm", "conv", "any"])

    def fcompute(i, j):
        axes = [tg.reduce_axis((0, e), name=f"{n}{s}") for n, e in zip("kl", extents)]
        reds = list(zip(axes, extents))
        k, l_axis = reds[0], (reds[1] if len(reds) > 1 else None)
        outer = [(i, shape[0]), (j, shape[1])]
        conds = []

        def read(t, leads):
            """``t`` read with dimension ``d`` led by ``leads[d] = (main, second)``."""
            if c.pick([False, True]):
                leads = leads[::-1]
            return t[tuple(_axis_index(c, m, sec, ext, conds)
                           for (m, sec), ext in zip(leads, t.shape))]

        def maybe(term):
            return term if term is not None and c.pick([False, True]) else None

        if layout == "gemm":
            product = (read(a, [(outer[0], maybe(l_axis)), (k, None)])
                       * read(b, [(k, maybe(l_axis)), (outer[1], None)]))
        elif layout == "conv":
            product = (read(a, [(outer[0], k), (outer[1], l_axis)])
                       * read(b, [(k, None), (l_axis, None) if l_axis else (k, None)]))
        else:
            product = (read(a, [(c.pick(outer), c.pick(reds + [None])) for _ in a.shape])
                       * read(b, [(c.pick(outer), c.pick(reds + [None])) for _ in b.shape]))
        return tg.sum(product, axis=axes, where=tg.all(*conds) if conds else None)

    return fcompute


#: how a stage body may end (see the generator's ``_body``)
WRAPS = ("none", "tanh", "exp", "select")


def build_program(c, large):
    """``(x, output, threads)``: a random program of one or two stages over ``x`` and the
    thread count to build it with. ``large`` programs have 16-48 x 16-48 stages and
    reductions of up to 24 x 5 points, so that the product kernels, the vector loops and
    the parallel loops take them; the others are a few points each."""
    if large:
        x = tg.placeholder((c.integer(16, 96), c.integer(16, 96)), dtype=F64, name="x")
    else:
        x = tg.placeholder((c.integer(2, 5), c.integer(2, 5)), dtype=F64, name="x")
    inputs, stages = [x], []
    for s in range(c.integer(1, 2)):
        shape = ((c.integer(16, 48), c.integer(16, 48)) if large
                 else (c.integer(1, 4), c.integer(1, 4)))
        kind = c.pick(["elementwise", "reduce", "reduce", "contraction", "contraction",
                       "scatter"])
        if kind == "elementwise":
            t = tg.compute(shape, lambda i, j, shape=shape: GEN._body(
                c, inputs, [(i, shape[0]), (j, shape[1])], WRAPS, GEN.WINDOW_KINDS),
                name=f"s{s}")
        elif kind == "reduce":
            t = tg.compute(shape, _reduction(c, inputs, s, shape, large), name=f"s{s}")
        elif kind == "contraction":
            t = tg.compute(shape, _contraction(c, inputs, s, shape, large), name=f"s{s}")
        else:
            src = c.pick(inputs)
            n = c.integer(1, 4)
            index = tg.compute(src.shape, lambda a, b, n=n: tg.cast(
                tg.floor(tg.abs(x[a % x.shape[0], b % x.shape[1]]) * 3.0), "int32") % n,
                name=f"idx{s}")
            t = tg.scatter_add((n, src.shape[1]), src.shape,
                               lambda a, b, index=index: (index[a, b], b),
                               lambda a, b, src=src: src[a, b] * 2.0,
                               init=None if not c.pick([False, True]) else
                               tg.compute((n, src.shape[1]), lambda a, b: x[a % x.shape[0],
                                                                           b % x.shape[1]],
                                          name=f"init{s}"),
                               name=f"s{s}")
        inputs.append(t)
        stages.append(t)
    return x, stages[-1], c.pick([1, 2])


@st.composite
def programs(draw, large=None):
    """Half of the programs large (see :func:`build_program`); ``large=False``: small
    ones only (for the Python interpreter of the loop IR)."""
    return build_program(GEN._Draw(draw), large=draw(st.booleans()) if large is None else large)


def with_gradient(program, seed):
    """``(inputs, outputs, feed)``: a random program's output and, when it has one, its
    gradient for a random head, with random values for the inputs."""
    x, out, _ = program
    rng = np.random.default_rng(seed)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    feed = {x: rng.standard_normal(x.shape), head: rng.standard_normal(out.shape)}
    outputs = [out]
    try:
        outputs += list(tg.differentiate(out, [x], head=head))
    except DifferentiationError:
        pass
    return ([x, head] if len(outputs) > 1 else [x]), outputs, feed


#: programs per run (half of them large, 16-48 x 16-48 stages: about 1.5 s each with
#: their gradient); ``TEGRAD_RANDOM_PROGRAMS=N`` runs more locally
EXAMPLES = int(os.environ.get("TEGRAD_RANDOM_PROGRAMS", "120"))

#: ``build`` options: bounds checks where the compiler offers them
BUILD_OPTIONS = ({"check_bounds": True}
                 if "check_bounds" in inspect.signature(build).parameters else {})


def check_program(program, seed, **options):
    """Build the program with its gradient and compare with the evaluator; returns the
    compiled function."""
    inputs, outputs, feed = with_gradient(program, seed)
    try:
        want = tg.evaluate(outputs, feed)
    except BufferTooLargeError:
        # the oracle evaluates each stage's reduction domain at once; the gradient of a
        # max-like reducer read through a few distinct elements can need more than the
        # machine has (seed 39916801 of a 10,000-program run: 32 GB), and then there is
        # nothing to compare with
        reject()
    f = build(inputs, outputs, threads=program[2], **BUILD_OPTIONS, **options)
    got = f(*[feed[t] for t in inputs])
    for t, g, w in zip(outputs, got, want):
        # sums of up to 120 terms, some reassociated (vector accumulators, the product
        # kernels): an error relative to the largest value
        scale = 1.0 + float(np.max(np.abs(w), initial=0.0))
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * scale,
                                   err_msg=f"{t.name} (threads={program[2]}):\n"
                                           f"{tg.format(outputs)}")
    return f


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_compiled_random_program_and_gradient_equal_evaluator(program, seed):
    check_program(program, seed)


@settings(max_examples=15, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_emitted_one_function_per_statement_equal_evaluator(program, seed):
    """The emission of large kernels in parts (here every top-level statement a part)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit_module, "PART_SIZE", 1)
        check_program(program, seed, name="in_parts")


#: seeds of large programs that, together, take every compiled path (a gemm kernel, a
#: product inside a fused nest, vector and parallel loops); seed 2's gradient reads a
#: guarded stage at a data-dependent index (its guard once failed to lower)
PATH_SEEDS = (2, 8, 9)


def test_large_random_programs_take_the_product_vector_and_parallel_paths():
    """Large programs of fixed seeds equal the evaluator, and between them their
    schedules use a product kernel, vector loops and parallel loops (so that the
    property tests' large programs exercise those paths)."""
    schedules = []
    for seed in PATH_SEEDS:
        program = build_program(GEN._Seeded(np.random.default_rng([seed, 7])), large=True)
        schedules.append(str(check_program((*program[:2], 2), seed).schedule))
    text = "\n".join(schedules)
    assert "gemm kernel" in text or "dot kernel" in text or "MatrixProduct" in text, text
    assert "vectorized" in text, text
    assert " parallel" in text, text
