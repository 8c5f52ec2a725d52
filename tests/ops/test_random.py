"""The counter-based generator: the intrinsic ``philox`` (Philox-4x32-10) and
``tg.random_uniform``.

Random123's known-answer vectors check the cipher, evaluated and compiled; compiled code
equals the evaluator bit for bit for random shapes, seeds, dtypes and thread counts;
fixed-seed statistical tests check the numbers (mean, variance, chi-square over bins,
pairs of neighbours, bit frequencies, correlations between neighbouring counters and
seeds); the derivative is zero; loops drawing numbers vectorise.
"""
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.philox import philox4x32, philox_bits
from tegrad.ir.random import random_bits
from tegrad.testing import check_grad

#: Random123's kat_vectors for philox4x32 with 10 rounds: counter words, key words, output
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

N = 1 << 16
#: fixed seeds of the statistical tests, including ones beyond int64 and negative ones
SEEDS = [0, 1, 2 ** 63 + 12345, -1]


def _words_to_u64(low, high):
    return (high << 32) | low


def _kat_arrays():
    """The KAT cases as the intrinsic's uint64 arguments and its expected results."""
    key = [_words_to_u64(*k) for _, k, _ in KAT]
    high = [_words_to_u64(c[2], c[3]) for c, _, _ in KAT]
    low = [_words_to_u64(c[0], c[1]) for c, _, _ in KAT]
    out = [_words_to_u64(o[0], o[1]) for _, _, o in KAT]
    return [np.array(v, dtype=np.uint64) for v in (key, high, low, out)]


def test_reference_cipher_matches_random123_known_answers():
    for counter, key, expected in KAT:
        assert tuple(int(w) for w in philox4x32(counter, key)) == expected


@pytest.mark.parametrize("threads", [1, 2])
def test_intrinsic_matches_known_answers_evaluated_and_compiled(threads):
    key, high, low, expected = _kat_arrays()
    K, H, L = (tg.placeholder((len(KAT),), dtype="uint64", name=n) for n in "KHL")
    out = tg.compute((len(KAT),), lambda i: tg.call("philox", K[i], H[i], L[i]), name="out")
    feed = {K: key, H: high, L: low}
    np.testing.assert_array_equal(tg.evaluate(out, feed), expected)
    f = tg.build([K, H, L], [out], threads=threads)
    np.testing.assert_array_equal(f(key, high, low)[0], expected)


def _uniform(seed, n=N, dtype="float64"):
    u = tg.compute((n,), lambda i: tg.random_uniform(seed, i, dtype=dtype), name="u")
    return tg.evaluate(u, {})


@pytest.mark.parametrize("dtype,bits", [("float16", 11), ("float32", 24), ("float64", 53)])
def test_uniform_is_the_top_bits_of_the_cipher_scaled(dtype, bits):
    # an independent formula: the cipher's 64 bits in numpy, shifted and scaled
    u = _uniform(5, 4096, dtype)
    raw = philox_bits(np.uint64(5), np.uint64(0), np.arange(4096, dtype=np.uint64))
    expected = (raw >> np.uint64(64 - bits)).astype(np.float64) * 2.0 ** -bits
    assert u.dtype == dtype
    np.testing.assert_array_equal(u.astype(np.float64), expected)
    assert u.min() >= 0 and u.max() < 1


@st.composite
def programs(draw):
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    seed = draw(st.integers(-2 ** 63, 2 ** 64 - 1))
    dtype = draw(st.sampled_from(["float16", "float32", "float64"]))
    counters = draw(st.sampled_from(["flat", "axes", "axes and seed input"]))
    return shape, seed, dtype, counters


@settings(max_examples=12, deadline=None)
@given(programs(), st.sampled_from([1, 2]))
def test_compiled_equals_evaluated_bit_for_bit(program, threads):
    shape, seed, dtype, counters = program
    S = tg.placeholder((), dtype="int64", name="S")
    x = tg.placeholder(shape, dtype=dtype, name="x")
    seed_value = np.array(seed % 2 ** 64, dtype=np.uint64).astype(np.int64)
    key = S if counters == "axes and seed input" else seed

    def index(i):
        if counters == "flat":
            flat = tg.cast(0, "int64")
            for d, a in enumerate(i):
                flat = flat * shape[d] + tg.cast(a, "int64")
            return (flat,)
        return tuple(i)

    bits = tg.compute(shape, lambda *i: random_bits(key, *index(i)), name="bits")
    u = tg.compute(shape, lambda *i: x[i] * tg.random_uniform(key, *index(i), dtype=dtype),
                   name="u")
    xv = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    feed = {x: xv, S: seed_value}
    expected = tg.evaluate([bits, u], feed)
    f = tg.build([x, S], [bits, u], threads=threads)
    for got, want in zip(f(xv, seed_value), expected):
        np.testing.assert_array_equal(got, want)


def _chi_square_bounds(dof, z=5.0):
    """The chi-square statistic's quantiles at ``-z`` and ``z`` standard normal deviations
    (Wilson-Hilferty: ``(X / dof)**(1/3)`` is nearly normal)."""
    s = math.sqrt(2.0 / (9 * dof))
    return tuple(dof * (1 - 2.0 / (9 * dof) + k * s) ** 3 for k in (-z, z))


def _chi_square(counts, expected):
    return float(np.sum((counts - expected) ** 2 / expected))


@pytest.mark.parametrize("seed", SEEDS)
def test_uniform_statistics(seed):
    u = _uniform(seed)
    # mean 1/2 and variance 1/12 within 5 standard errors
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt((1 / 80 - 1 / 144) / N)
    # chi-square over 64 equal bins, and over 16 x 16 bins of consecutive pairs
    lo, hi = _chi_square_bounds(63)
    assert lo < _chi_square(np.bincount((u * 64).astype(int), minlength=64), N / 64) < hi
    pairs = (u[0::2] * 16).astype(int) * 16 + (u[1::2] * 16).astype(int)
    lo, hi = _chi_square_bounds(255)
    assert lo < _chi_square(np.bincount(pairs, minlength=256), N / 2 / 256) < hi
    # no correlation between neighbouring counters, nor at a few strides
    for lag in (1, 2, 8, 1024):
        assert abs(np.corrcoef(u[:-lag], u[lag:])[0, 1]) < 5 / math.sqrt(N)


def test_every_bit_is_fair():
    b = tg.evaluate(tg.compute((N,), lambda i: random_bits(9, i), name="b"), {})
    ones = ((b[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    assert np.all(np.abs(ones - N / 2) < 5 * math.sqrt(N / 4))


def test_neighbouring_seeds_and_counter_pairs_are_uncorrelated():
    base = _uniform(1000)
    for other in (_uniform(1001), _uniform(1000 + 2 ** 32)):
        assert abs(np.corrcoef(base, other)[0, 1]) < 5 / math.sqrt(N)
        # not a shifted copy either
        for shift in range(4):
            assert abs(np.corrcoef(base[shift:], other[:N - shift])[0, 1]) < 5 / math.sqrt(N)
    # two counters: neighbours along either axis are uncorrelated
    grid = tg.evaluate(tg.compute((256, 256), lambda i, j: tg.random_uniform(3, i, j,
                                                                              dtype="float64"),
                                  name="g"), {})
    for a, b in ((grid[:-1], grid[1:]), (grid[:, :-1], grid[:, 1:])):
        assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 5 / math.sqrt(grid.size)
    # one counter c is the counter pair (0, c); three counters hash the first two into the key
    pair = tg.compute((8,), lambda i: tg.random_uniform(3, 0, i), name="p")
    single = tg.compute((8,), lambda i: tg.random_uniform(3, i), name="s")
    triple = tg.compute((8,), lambda i: tg.random_uniform(3, 0, 0, i), name="t")
    p, s, t = tg.evaluate([pair, single, triple], {})
    np.testing.assert_array_equal(p, s)
    assert not np.any(t == s)


def test_derivative_is_zero():
    x = tg.placeholder((6,), dtype="float64", name="x")
    S = tg.placeholder((), dtype="int32", name="S")
    y = tg.compute((6,), lambda i: x[i] * tg.random_uniform(S, i, dtype="float64")
                   + x[i] * x[i], name="y")
    feed = {x: np.linspace(-1, 1, 6), S: np.array(4, dtype=np.int32)}
    (dx,) = tg.differentiate(y, [x])
    u = tg.evaluate(tg.compute((6,), lambda i: tg.random_uniform(S, i, dtype="float64"),
                               name="u"), feed)
    np.testing.assert_allclose(tg.evaluate(dx, feed), u + 2 * feed[x], rtol=1e-14)
    assert check_grad(y, [x], feed=feed, head="random", rng=2) < 1e-6


def test_compiled_loop_vectorises():
    n = 4096
    x = tg.placeholder((n,), dtype="float32", name="x")
    S = tg.placeholder((), dtype="int64", name="S")
    y = tg.compute((n,), lambda i: tg.if_then_else(tg.random_uniform(S, i) >= 0.5, x[i], 0.0),
                   name="y")
    ir = str(tg.build([x, S], [y], threads=1).llvm_ir)
    # the rounds' 32 x 32 -> 64-bit products and the mixing as vector integer operations
    assert re.search(r"= mul (nuw )?(nsw )?<\d+ x i64>", ir)
    assert re.search(r"= xor <\d+ x i(32|64)>", ir)
    # the conversion from 24-bit integers (LLVM marks it non-negative: ``uitofp nneg``)
    assert re.search(r"= [su]itofp (nneg )?<\d+ x i32> .* to <\d+ x float>", ir)


def test_errors():
    x = tg.placeholder((3,), dtype="float32", name="x")
    with pytest.raises(tg.TegradError, match="at least one counter"):
        tg.random_uniform(1)
    with pytest.raises(tg.DTypeError, match="seeds and counters are integers"):
        tg.compute((3,), lambda i: tg.random_uniform(1, x[i]), name="bad")
    with pytest.raises(tg.TegradError, match="the seed must be an integer"):
        tg.random_uniform(1.5, 0)
    with pytest.raises(tg.DTypeError, match="dtype must be a float dtype"):
        tg.random_uniform(1, 0, dtype="int32")
    with pytest.raises(tg.DTypeError, match="philox is not defined for float32"):
        tg.compute((3,), lambda i: tg.call("philox", x[i], x[i], x[i]), name="bad")
