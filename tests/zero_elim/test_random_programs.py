"""Random programs: the optimised gradient equals the naive one and finite differences.

Programs are compositions of stages whose reads use affine, floor-division and modulo
indices (some guarded by conditions, like padding), elementwise operations, and
reductions (sum, max, min, prod and custom reducers, some with ``where`` and ``init``,
some over a single point). One builder makes them from a chooser: hypothesis draws
the structure in one test; a seeded generator drives the fuzzer, which checks every
program's optimised gradient against the naive one and against central finite
differences along random directions, and for some programs the second-order gradient.

The fuzzer runs ``FUZZ_COUNT`` programs per test run; run many more with::

    python tests/zero_elim/test_random_programs.py --seed 0 --count 20000

(``--windows`` adds reads through the windows of strided, dilated convolutions,
``s*i + d*k - p`` under their bounds, and residues ``i // s``, ``i % s``: the index
kinds the compiled random programs of ``tests/codegen`` draw.)
"""
import argparse
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg

F64 = "float64"
#: programs the seeded fuzzer checks in one test run (a few hundred, well under a minute)
FUZZ_COUNT = 250

LSE = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                      lambda dtype: tg.min_value(dtype), name="logsumexp")
LSE_DECLARED = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                               lambda dtype: tg.min_value(dtype), name="logsumexp_d",
                               derivative=lambda x, y: tg.exp(x - y))
PRODUCT = tg.comm_reducer(lambda a, b: a * b, lambda dtype: 1.0, name="product")
REDUCERS = {"sum": tg.sum, "max": tg.max, "min": tg.min, "prod": tg.prod, "lse": LSE,
            "lse_declared": LSE_DECLARED, "product": PRODUCT}


class _Draw:
    """The choices of hypothesis's ``draw``: ``pick(options)`` and ``integer(lo, hi)``."""

    def __init__(self, draw):
        self.draw = draw

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def integer(self, lo, hi):
        return self.draw(st.integers(lo, hi))


class _Seeded:
    """The same choices from a numpy generator."""

    def __init__(self, rng):
        self.rng = rng

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def integer(self, lo, hi):
        return int(self.rng.integers(lo, hi + 1))


#: the index kinds of ``_index`` (this file's tests draw these)
INDEX_KINDS = ("plain", "affine_mod", "div_mod", "div", "shifted")
#: with the reads of strided, dilated convolutions and the residues of their gradients
WINDOW_KINDS = INDEX_KINDS + ("window", "window", "residue_div", "residue_mod")


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


def _body(c, inputs, variables, wraps, kinds=INDEX_KINDS):
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
                return _body(c, inputs, variables, wraps, kinds)
            variables.append((k, extent))
            body = _body(c, inputs, variables, wraps, kinds)
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
    return build_program(_Draw(draw))


@settings(max_examples=60, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_optimised_gradient_of_random_program_equals_naive(program, seed):
    x, out = program
    rng = np.random.default_rng(seed)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    feed = {x: rng.standard_normal(x.shape), head: rng.standard_normal(out.shape)}
    res = tg.differentiate(out, [x], head=head)
    optimised, naive = tg.evaluate([res[0], res.naive[0]], feed)
    np.testing.assert_allclose(optimised, naive, rtol=1e-9, atol=1e-12,
                               err_msg=tg.format(res.naive[0]) + "\n---\n" + tg.format(res[0]))


# ---------------------------------------------------------------------------------------
# the seeded fuzzer
# ---------------------------------------------------------------------------------------

def _directional_difference(out, x, feed, head_value, direction, eps=1e-6):
    """Central difference of ``sum(head * out)`` along ``direction`` in ``x``.

    The difference is taken element by element before the weighted sum, so that outputs
    that do not move (an empty reduction's identity, ``-max_float`` for a log-sum-exp)
    cancel exactly instead of swamping the others.
    """
    plus = tg.evaluate(out, {x: feed[x] + eps * direction})
    minus = tg.evaluate(out, {x: feed[x] - eps * direction})
    return float(np.sum((plus - minus) * head_value)) / (2 * eps)


def _matches_finite_differences(gradient, out, x, feed, head_value, rng):
    """``<gradient, v>`` equals the directional difference along two random ``v``."""
    for _ in range(2):
        v = rng.standard_normal(x.shape)
        analytic = float(np.sum(gradient * v))
        if not any(abs(analytic - _directional_difference(out, x, feed, head_value, v, eps))
                   <= 1e-6 + 1e-5 * abs(analytic) for eps in (1e-6, 1e-7)):
            return False
    return True


def fuzz_one(seed, second_order=False, kinds=INDEX_KINDS):
    """Check the program of ``seed``; returns None, or a description of the mismatch."""
    rng = np.random.default_rng(seed)
    x, out = build_program(_Seeded(rng), reducers=("none",) + tuple(REDUCERS),
                           wraps=("none", "tanh", "exp", "select", "square"), options=True,
                           kinds=kinds)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    feed = {x: rng.uniform(-1.0, 1.0, x.shape)}
    head_value = rng.uniform(-1.0, 1.0, out.shape)
    with np.errstate(all="ignore"):
        res = tg.differentiate(out, [x], head=head)
        optimised, naive = tg.evaluate([res[0], res.naive[0]], {**feed, head: head_value})
        problems = []
        if not np.allclose(optimised, naive, rtol=1e-9, atol=1e-12, equal_nan=True):
            problems.append(f"optimised != naive:\n{optimised}\n{naive}")
        # finite differences exist where the output is finite
        if np.all(np.isfinite(tg.evaluate(out, feed))) and \
                not _matches_finite_differences(optimised, out, x, feed, head_value, rng):
            problems.append(f"gradient != finite differences (directional):\n{optimised}")
        if second_order:
            # the gradient differentiated again: optimised against naive, where the naive
            # one is defined (it may multiply an infinite partial derivative, as at a
            # log-sum-exp of no point, by a tangent that is structurally zero: NaN; the
            # optimised form drops such terms)
            res2 = tg.differentiate(res[0], [x])
            second, second_naive = tg.evaluate([res2[0], res2.naive[0]],
                                               {**feed, head: head_value})
            defined = np.isfinite(second_naive)
            if not np.allclose(second[defined], second_naive[defined], rtol=1e-8,
                               atol=1e-10):
                problems.append(f"second order: optimised != naive:\n{second}\n"
                                f"{second_naive}")
    if not problems:
        return None
    return (f"seed {seed}:\n{tg.format(out)}\n--- gradient\n{tg.format(res[0])}\n"
            + "\n".join(problems))


def test_fuzz_random_program_gradients():
    failures = [f for f in (fuzz_one(seed, second_order=seed % 10 == 0)
                            for seed in range(FUZZ_COUNT)) if f is not None]
    assert not failures, "\n\n".join(failures[:3])


def main(argv=None):
    parser = argparse.ArgumentParser(description="Fuzz random program gradients.")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--count", type=int, default=FUZZ_COUNT, help="number of programs")
    parser.add_argument("--windows", action="store_true",
                        help="reads through convolution windows and residues too")
    args = parser.parse_args(argv)
    kinds = WINDOW_KINDS if args.windows else INDEX_KINDS
    failures = 0
    for seed in range(args.seed, args.seed + args.count):
        try:
            problem = fuzz_one(seed, second_order=seed % 10 == 0, kinds=kinds)
        except Exception as err:  # a crash is a failure too: report it and go on
            problem = f"seed {seed}: {type(err).__name__}: {err}"
        if problem is not None:
            failures += 1
            print(problem, flush=True)
        if (seed - args.seed + 1) % 1000 == 0:
            print(f"{seed - args.seed + 1} programs, {failures} mismatches", flush=True)
    print(f"done: {args.count} programs from seed {args.seed}, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
