"""Random programs: the optimised gradient equals the naive one and finite differences.

Programs are compositions of stages whose reads use affine, floor-division and modulo
indices (some guarded by conditions, like padding), elementwise operations, and
reductions (sum, max, min, prod and custom reducers, some with ``where`` and ``init``,
some over a single point). One builder (``tests/support/random_programs.py``) makes them
from a chooser: hypothesis draws the structure in one test; a seeded generator drives the
fuzzer, which checks every program's optimised gradient against the naive one and against
central finite differences along random directions, and for some programs the
second-order gradient.

The fuzzer runs ``FUZZ_COUNT`` programs per test run; run many more with::

    python tests/zero_elim/test_random_programs.py --seed 0 --count 20000

(``--windows`` adds reads through the windows of strided, dilated convolutions,
``s*i + d*k - p`` under their bounds, and residues ``i // s``, ``i % s``: the index
kinds the compiled random programs of ``tests/codegen`` draw.)
"""
import argparse
import pathlib
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg

if __name__ == "__main__":  # run as the fuzzer: the generators are in tests/support
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from support.random_programs import (  # noqa: E402
    F64, INDEX_KINDS, REDUCERS, WINDOW_KINDS, Seeded, build_program, programs)

#: programs the seeded fuzzer checks in one test run (a few hundred, well under a minute)
FUZZ_COUNT = 250


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
    x, out = build_program(Seeded(rng), reducers=("none",) + tuple(REDUCERS),
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
