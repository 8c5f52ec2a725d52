"""Random programs for the compiler: the stages of :mod:`support.random_programs` (affine,
floor-division and modulo indices, guarded reads, strided and dilated windows, residues)
extended with what lowering must handle: every reducer (sum, prod, max, min, a
``comm_reducer``) with ``init``, non-rectangular reduction domains (triangular ``where``,
bounds that move with the outer axis, divisibility conditions that become strides),
reductions over two axes of independent extents, contractions (a matrix product, a
convolution, a sum of two products) for the product kernels, reads of one constant row
(whose gradients scatter into slices), and scatters with data-dependent targets.

``programs()`` draws them with hypothesis (half large, for the gemm and dot kernels, the
vector loops and the parallel loops), ``build_program(Seeded(rng), large)`` from a
seed; ``with_gradient`` adds the zero-eliminated gradient and random values. The
compiled random-program test (``tests/codegen/test_random_programs_compiled.py``), the
lowering, schedule and thread tests run them.
"""
import numpy as np
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.errors import DifferentiationError

from support.random_programs import PINNED_KINDS, WINDOW_KINDS, Draw, stage_body, window_index

F64 = "float64"

ABSMAX = tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)), lambda dtype: 0.0,
                         name="absmax")
REDUCERS = {"sum": tg.sum, "prod": tg.prod, "max": tg.max, "min": tg.min, "absmax": ABSMAX}
DOMAINS = ["box", "triangular", "moving", "stride", "stride_sum"]


def _reduction(c, inputs, s, shape, large, kinds):
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
        body = stage_body(c, inputs, variables, WRAPS, kinds)
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
    index, more = window_index(c, [main, second], extent)
    conds += more
    return index


def _contraction(c, inputs, s, shape, large, layouts):
    """A sum of a product of two reads over one or two reduction axes, what the product
    kernels take, with strides, dilations, padding masks and non-square windows:
    ``gemm``, ``a[i~k, k~l] * b[k~l, j]`` in either order of dimensions; ``conv``,
    ``a[s*i + d*k - p, s'*j + d'*l - p'] * b[k, l]``; ``any``, each index a window of
    any outer and any reduction axis (``~`` is a window of the second axis, sometimes);
    ``sum_of_products``, two ``gemm`` products summed under one reduction."""
    a, b = c.pick(inputs), c.pick(inputs)
    extents = [c.integer(1, 24 if large else 5)]
    if c.pick([False, True]):
        extents.append(c.integer(1, 5))
    layout = c.pick(list(layouts))
    a2, b2 = (c.pick(inputs), c.pick(inputs)) if layout == "sum_of_products" else (a, b)

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

        if layout in ("gemm", "sum_of_products"):
            product = (read(a, [(outer[0], maybe(l_axis)), (k, None)])
                       * read(b, [(k, maybe(l_axis)), (outer[1], None)]))
            if layout == "sum_of_products":  # one product kernel per term, accumulating
                product = product + (read(a2, [(outer[0], maybe(l_axis)), (k, None)])
                                     * read(b2, [(k, maybe(l_axis)), (outer[1], None)]))
        elif layout == "conv":
            product = (read(a, [(outer[0], k), (outer[1], l_axis)])
                       * read(b, [(k, None), (l_axis, None) if l_axis else (k, None)]))
        else:
            product = (read(a, [(c.pick(outer), c.pick(reds + [None])) for _ in a.shape])
                       * read(b, [(c.pick(outer), c.pick(reds + [None])) for _ in b.shape]))
        return tg.sum(product, axis=axes, where=tg.all(*conds) if conds else None)

    return fcompute


#: how a stage body may end (see :func:`support.random_programs.stage_body`)
WRAPS = ("none", "tanh", "exp", "select")


#: the draws of :func:`build_program`'s first generation (no reads of a constant row, no
#: sums of products): the same seed gives the same program as before they were added
FIRST = {"kinds": WINDOW_KINDS, "layouts": ("gemm", "gemm", "conv", "any")}
#: the draws of the current generation
CURRENT = {"kinds": PINNED_KINDS, "layouts": ("gemm", "gemm", "conv", "any", "sum_of_products")}


def build_program(c, large, generation=CURRENT):
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
            t = tg.compute(shape, lambda i, j, shape=shape: stage_body(
                c, inputs, [(i, shape[0]), (j, shape[1])], WRAPS, generation["kinds"]),
                name=f"s{s}")
        elif kind == "reduce":
            t = tg.compute(shape, _reduction(c, inputs, s, shape, large, generation["kinds"]), name=f"s{s}")
        elif kind == "contraction":
            t = tg.compute(shape, _contraction(c, inputs, s, shape, large, generation["layouts"]), name=f"s{s}")
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
    return build_program(Draw(draw), large=draw(st.booleans()) if large is None else large)


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
