"""Random programs of stages, built from a chooser: the generators behind the random-program
tests of zero elimination (``tests/zero_elim/test_random_programs.py``) and of code
generation (:mod:`support.compiled_programs`).

Stages read their inputs through affine, floor-division and modulo indices (some guarded
by conditions, like padding), and with ``WINDOW_KINDS`` through the windows of strided,
dilated convolutions and their residues; they combine reads elementwise and reduce with
sum, max, min, prod and custom reducers, some with ``where`` and ``init``. A chooser
makes every choice: :class:`Draw` takes them from hypothesis, :class:`Seeded` from a
numpy generator, so that a property test and a seeded fuzzer build the same programs.
"""
from hypothesis import strategies as st

import tegrad as tg

F64 = "float64"

LSE = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                      lambda dtype: tg.min_value(dtype), name="logsumexp")
LSE_DECLARED = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                               lambda dtype: tg.min_value(dtype), name="logsumexp_d",
                               derivative=lambda x, y: tg.exp(x - y))
PRODUCT = tg.comm_reducer(lambda a, b: a * b, lambda dtype: 1.0, name="product")
REDUCERS = {"sum": tg.sum, "max": tg.max, "min": tg.min, "prod": tg.prod, "lse": LSE,
            "lse_declared": LSE_DECLARED, "product": PRODUCT}


class Draw:
    """The choices of hypothesis's ``draw``: ``pick(options)`` and ``integer(lo, hi)``."""

    def __init__(self, draw):
        self.draw = draw

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def integer(self, lo, hi):
        return self.draw(st.integers(lo, hi))


class Seeded:
    """The same choices from a numpy generator."""

    def __init__(self, rng):
        self.rng = rng

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def integer(self, lo, hi):
        return int(self.rng.integers(lo, hi + 1))


#: the index kinds of ``_index`` (the zero-elimination tests draw these)
INDEX_KINDS = ("plain", "affine_mod", "div_mod", "div", "shifted")
#: with the reads of strided, dilated convolutions and the residues of their gradients
WINDOW_KINDS = INDEX_KINDS + ("window", "window", "residue_div", "residue_mod")
#: with reads of one constant row (``x[2, j]``: a stacked tensor read one slice at a time)
PINNED_KINDS = WINDOW_KINDS + ("pinned",)


def window_index(c, terms, extent):
    """``s*v + d*u - p`` for ``terms = [(v, size_v), (u, size_u)]`` (either may be None:
    no term) with a stride ``s`` in 1-4, a dilation ``d`` in 1-3 and a padding ``p`` in
    0-2 (1, 1 and 0 more often than the others), and the conditions keeping it in
    ``[0, extent)`` (only those some ``v, u`` in their ranges can violate), as the
    convolutions of ``tegrad.nn`` read their input."""
    s, d, p = c.pick([1, 1, 2, 3, 4]), c.pick([1, 1, 2, 3]), c.pick([0, 0, 1, 2])
    index, highest = None, -p
    for (term, scale) in zip(terms, (s, d)):
        if term is None:
            continue
        var, size = term
        part = var if scale == 1 else var * scale
        index = part if index is None else index + part
        highest += scale * (size - 1)
    if index is None:
        return p % extent, []
    if p:
        index = index - p
    conds = []
    if p > 0:
        conds.append(index >= 0)
    if highest >= extent:
        conds.append(index < extent)
    return index, conds


def _index(c, variables, extent, kinds=INDEX_KINDS):
    """An integer index into a dimension of ``extent`` (in bounds where it is read), and
    the guard of a padded read (or None)."""
    kind = c.pick(list(kinds))
    if kind == "pinned":
        # one row of a stacked tensor (a step's slice: its gradient scatters into slices)
        return c.integer(0, extent - 1), None
    v, size = variables[c.integer(0, len(variables) - 1)]
    if kind == "plain" and size <= extent:
        return v, None
    if kind == "div" and size <= 2 * extent:
        return v // 2, None
    if kind == "shifted" and size <= extent + 1:
        # a padded read: only where the guard holds
        return v - 1, tg.all(v >= 1, v - 1 < extent)
    if kind == "window":
        other = variables[c.integer(0, len(variables) - 1)]
        index, conds = window_index(c, [(v, size), other], extent)
        return index, (tg.all(*conds) if conds else None)
    if kind == "residue_div":
        step = c.integer(2, 4)
        if size <= step * extent:
            return v // step, None
    if kind == "residue_mod":
        step = c.integer(2, 4)
        if step <= extent:
            return v % step, None
    a = c.integer(-3, 3)
    u, _ = variables[c.integer(0, len(variables) - 1)]
    b = c.integer(-2, 2)
    offset = c.integer(0, 5)
    inner = v * a + u * b + offset
    if kind == "div_mod":
        return (inner // c.integer(1, 3)) % extent, None
    return inner % extent, None


def _read(c, tensor, variables, kinds=INDEX_KINDS):
    indices, guards = [], []
    for extent in tensor.shape:
        idx, guard = _index(c, variables, extent, kinds)
        indices.append(idx)
        if guard is not None:
            guards.append(guard)
    value = tensor[tuple(indices)]
    if guards:
        return tg.if_then_else(tg.all(*guards), value, 0.0)
    return value


def stage_body(c, inputs, variables, wraps, kinds=INDEX_KINDS):
    terms = [_read(c, c.pick(inputs), variables, kinds) for _ in range(c.integer(1, 3))]
    out = terms[0]
    for t in terms[1:]:
        op = c.pick(["add", "mul", "sub"])
        out = out + t if op == "add" else (out * t if op == "mul" else out - t)
    wrap = c.pick(wraps)
    if wrap == "tanh":
        out = tg.tanh(out)
    elif wrap == "exp":
        out = tg.exp(out * 0.1)
    elif wrap == "select":
        v, _ = variables[0]
        out = tg.if_then_else(v % 2 == 0, out, out * 2.0)
    elif wrap == "square":
        out = out * out + 0.5
    return out


def build_program(c, reducers=("none", "sum", "max"), wraps=("none", "tanh", "exp", "select"),
                  options=False, kinds=INDEX_KINDS):
    """``(x, output)``: a random program of one to two stages over a placeholder ``x``.

    ``reducers`` names the reductions stages may use (keys of ``REDUCERS``, or "none");
    with ``options`` a reduction may also have a ``where`` or an ``init``; ``kinds`` are
    the index kinds of its reads (``WINDOW_KINDS`` adds convolution windows).
    """
    x = tg.placeholder((c.integer(2, 5), c.integer(2, 5)), dtype=F64, name="x")
    inputs = [x]
    for s in range(c.integer(1, 2)):
        shape = (c.integer(1, 4), c.integer(1, 4))
        reduce = c.pick(list(reducers))
        extent = c.integer(1, 4)
        k = tg.reduce_axis((0, extent), name=f"k{s}")
        where = options and c.pick([False, False, True])
        # a masked reduction of max, min or log-sum-exp may cover no point: its value
        # would be the reducer's infinite (or -max_float) identity, whose derivatives
        # are not defined; an init keeps it finite
        init = options and (c.pick([False, False, True])
                            or (where and reduce in ("max", "min", "lse", "lse_declared")))

        def fcompute(i, j, reduce=reduce, k=k, shape=shape, where=where, init=init):
            variables = [(i, shape[0]), (j, shape[1])]
            if reduce == "none":
                return stage_body(c, inputs, variables, wraps, kinds)
            variables.append((k, extent))
            body = stage_body(c, inputs, variables, wraps, kinds)
            kwargs = {}
            if where:
                kwargs["where"] = (k + i) % 3 != 1
            if init:
                kwargs["init"] = _read(c, x, variables[:2], kinds) * 0.5
            return REDUCERS[reduce](body, axis=k, **kwargs)

        inputs = inputs + [tg.compute(shape, fcompute, name=f"s{s}")]
    return x, inputs[-1]


@st.composite
def programs(draw):
    return build_program(Draw(draw))
