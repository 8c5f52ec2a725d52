"""Every binary op, comparison, intrinsic and conversion compiled through LLVM agrees with
the evaluator, on the values where LLVM's defaults differ from numpy (NaN, +-inf, -0.0,
negative operands of // and %, ties of round, out-of-range and non-finite float->int
casts, integer overflow), for every dtype the language allows.

Programs here are single elementwise stages; a small test helper turns them into
hand-built loop-IR kernels (a loop per axis around one store), so the backend is tested on
its own."""
import itertools
import re

import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen.llvm.intrinsics import ROOT_POWER_QUARTERS
from tegrad.ir import expr as ex
from tegrad.ir.expr import BINARY_OPS, COMPARE_OPS, Const, Var
from tegrad.ir.intrinsics import INTRINSICS
from tegrad.ir.mapper import IdentityMapper
from tegrad.codegen.loops import nodes as n
from tegrad.codegen.llvm.arithmetic import BINARY_LOWERINGS, COMPARE_LOWERINGS
from tegrad.codegen.llvm.conversions import CONVERSION_KINDS
from tegrad.codegen.llvm.emit import EXPR_LOWERINGS, STMT_LOWERINGS
from tegrad.codegen.llvm.intrinsics import INTRINSIC_LOWERINGS
from tegrad.codegen.runtime.executable import Executable

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
DTYPES = FLOATS + INTS + ("bool",)

FLOAT_VALUES = [-3.7, -2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.5, 3.7, -7.0, 7.0, 1e-30,
                1e30, -1e30, 3e9, -3e9, 2.5e19, -9.3e18, 1.9e19, 70000.5, -300.7, 255.9,
                np.inf, -np.inf, np.nan]


def int_values(dtype):
    info = np.iinfo(dtype)
    vals = [info.min, info.min + 1, -7, -3, -2, -1, 0, 1, 2, 3, 5, 7, info.max - 1, info.max]
    return sorted({v for v in vals if info.min <= v <= info.max})


def values(dtype):
    if dtype == "bool":
        return [False, True]
    if dtype in FLOATS:
        return FLOAT_VALUES
    return int_values(dtype)


# -- a minimal elementwise "lowering" for these tests -----------------------------------


class _ReadsToLoads(IdentityMapper):
    def __init__(self, buffers):
        self.buffers = buffers

    def map_read(self, e, *args):
        return n.Load(self.buffers[id(e.tensor)], tuple(self(i) for i in e.indices))


def elementwise_kernel(outs, inputs, name="k"):
    """The loop-IR kernel computing the elementwise compute stages ``outs`` (one loop
    nest each) from the placeholders ``inputs``."""
    bufs = {id(t): n.Buffer(t.name, t.shape, t.dtype, "input") for t in inputs}
    out_bufs = [n.Buffer(f"{o.name}_{k}", o.shape, o.dtype, "output") for k, o in enumerate(outs)]
    nests = []
    for out, out_buf in zip(outs, out_bufs):
        body = _ReadsToLoads(bufs)(out.op.body)
        loop_vars = [Var(ax.name, "int64") for ax in out.op.axes]
        stmt = n.Store(out_buf, tuple(loop_vars), body)
        for v, extent in reversed(list(zip(loop_vars, out.shape))):
            stmt = n.For(v, Const(0, "int64"), Const(extent, "int64"), stmt)
        nests.append(stmt)
    return n.Kernel(name, tuple(bufs[id(t)] for t in inputs) + tuple(out_bufs), (),
                    n.Block(tuple(nests)))


def run_compiled(outs, inputs, feeds):
    """Compile and run; one array per output (``outs`` a tensor or a list)."""
    single = not isinstance(outs, list)
    outs = [outs] if single else outs
    exe = Executable(elementwise_kernel(outs, inputs))
    results = [np.empty(o.shape, o.dtype) for o in outs]
    exe.run([np.ascontiguousarray(f) for f in feeds] + results)
    return results[0] if single else results


def assert_matches(outs, inputs, feeds):
    outs = outs if isinstance(outs, list) else [outs]
    got_all = run_compiled(outs, inputs, feeds)
    for out, got in zip(outs, got_all):
        expected = tg.evaluate(out, dict(zip(inputs, feeds)))
        assert got.dtype == expected.dtype, out.name
        if got.dtype.kind == "f":
            tol = {np.float16: 1e-3, np.float32: 2e-6}.get(got.dtype.type, 1e-14)
            np.testing.assert_allclose(got, expected, rtol=tol, atol=0, equal_nan=True,
                                       err_msg=out.name)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=out.name)


def pairs(dtype_a, dtype_b=None, keep=lambda a, b: True):
    dtype_b = dtype_b or dtype_a
    combos = [(a, b) for a, b in itertools.product(values(dtype_a), values(dtype_b)) if keep(a, b)]
    a = np.array([c[0] for c in combos], dtype=dtype_a)
    b = np.array([c[1] for c in combos], dtype=dtype_b)
    return a, b


def binary_program(op, dtype_a, dtype_b=None):
    dtype_b = dtype_b or dtype_a
    a, b = pairs(dtype_a, dtype_b, keep=_keep(op, dtype_a))
    A = tg.placeholder(a.shape, dtype=dtype_a, name="A")
    B = tg.placeholder(b.shape, dtype=dtype_b, name="B")
    return A, B, a, b


def _keep(op, dtype):
    if op in ("floordiv", "floormod") and dtype in INTS:
        return lambda a, b: b != 0
    return lambda a, b: True


# -- completeness of the tables ---------------------------------------------------------


def test_tables_cover_every_op_intrinsic_and_node():
    assert set(BINARY_LOWERINGS) == set(BINARY_OPS)
    assert set(COMPARE_LOWERINGS) == set(COMPARE_OPS)
    assert set(INTRINSIC_LOWERINGS) == set(INTRINSICS)
    assert set(STMT_LOWERINGS) == set(n.Stmt.__subclasses__())
    expr_kinds = {c for c in vars(ex).values()
                  if isinstance(c, type) and issubclass(c, ex.Expr) and c is not ex.Expr}
    assert set(EXPR_LOWERINGS) == expr_kinds | {n.Load}
    kinds = ("bool", "int", "float")
    assert set(CONVERSION_KINDS) == {f"{a}->{b}" for a in kinds for b in kinds}


# -- binary ops and comparisons ---------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_binary_ops(dtype):
    a, b = pairs(dtype, keep=lambda a, b: dtype in FLOATS or b != 0)
    A = tg.placeholder(a.shape, dtype=dtype, name="A")
    B = tg.placeholder(b.shape, dtype=dtype, name="B")
    ops = [op for op in BINARY_OPS if op != "div" or dtype in FLOATS]
    outs = [tg.compute(a.shape, lambda i, op=op: ex.binary(op, A[i], B[i]), name=op)
            for op in ops]
    assert_matches(outs, [A, B], [a, b])


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_max_and_min_give_numpys_zero_signs_and_nan_payloads(dtype):
    # numpy returns the second operand on ties (-0.0 against 0.0) and the first NaN
    a, b = pairs(dtype)
    bits = {"float16": "uint16", "float32": "uint32"}.get(dtype, "uint64")
    quiet = np.array([{"float16": 0x7E00, "float32": 0x7FC00000}.get(dtype, 0x7FF8000000000000)],
                     bits)
    nan_a, nan_b = (quiet | 1).view(dtype)[0], (quiet | 2).view(dtype)[0]
    a = np.concatenate([a, [nan_a, nan_a, 1.0, -0.0, 0.0]]).astype(dtype)
    b = np.concatenate([b, [nan_b, 1.0, nan_b, 0.0, -0.0]]).astype(dtype)
    A = tg.placeholder(a.shape, dtype=dtype, name="A")
    B = tg.placeholder(b.shape, dtype=dtype, name="B")
    outs = [tg.compute(a.shape, lambda i, op=op: ex.binary(op, A[i], B[i]), name=op)
            for op in ("max", "min")]
    for out, got in zip(outs, run_compiled(outs, [A, B], [a, b])):
        want = tg.evaluate(out, {A: a, B: b})
        np.testing.assert_array_equal(got.view(bits), want.view(bits), err_msg=out.name)


@pytest.mark.parametrize("dtypes", [("int8", "int32"), ("uint8", "int8"), ("uint32", "int64"),
                                    ("int16", "uint16")])
def test_binary_ops_of_mixed_integer_dtypes(dtypes):
    a, b = pairs(*dtypes, keep=lambda a, b: b != 0)
    A = tg.placeholder(a.shape, dtype=dtypes[0], name="A")
    B = tg.placeholder(b.shape, dtype=dtypes[1], name="B")
    outs = [tg.compute(a.shape, lambda i, op=op: ex.binary(op, A[i], B[i]), name=op)
            for op in BINARY_OPS if op != "div"]
    assert_matches(outs, [A, B], [a, b])


@pytest.mark.parametrize("dtypes", [(d, d) for d in DTYPES] + [("int8", "uint8"),
                                                              ("uint64", "int64"),
                                                              ("int32", "int64")])
def test_comparisons(dtypes):
    a, b = pairs(*dtypes)
    A = tg.placeholder(a.shape, dtype=dtypes[0], name="A")
    B = tg.placeholder(b.shape, dtype=dtypes[1], name="B")
    outs = [tg.compute(a.shape, lambda i, op=op: ex.compare(op, A[i], B[i]), name=op)
            for op in COMPARE_OPS]
    assert_matches(outs, [A, B], [a, b])


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", ["floordiv", "floormod"])
def test_integer_division_by_zero_raises_like_the_evaluator(op, dtype):
    a = np.array([5, 0, 3], dtype=dtype)
    b = np.array([1, 0, 2], dtype=dtype)
    A = tg.placeholder((3,), dtype=dtype, name="A")
    B = tg.placeholder((3,), dtype=dtype, name="B")
    out = tg.compute((3,), lambda i: ex.binary(op, A[i], B[i]), name="quot")
    with pytest.raises(tg.TegradError):
        tg.evaluate(out, {A: a, B: b})
    with pytest.raises(tg.TegradError, match="quot"):
        run_compiled(out, [A, B], [a, b])


def test_division_by_zero_in_an_unselected_branch_is_not_an_error():
    a = np.array([5, 6, 7], dtype="int32")
    b = np.array([2, 0, -3], dtype="int32")
    A = tg.placeholder((3,), dtype="int32", name="A")
    B = tg.placeholder((3,), dtype="int32", name="B")
    out = tg.compute((3,), lambda i: tg.if_then_else(B[i] != 0, A[i] // B[i], -1), name="q")
    assert_matches(out, [A, B], [a, b])
    both = tg.compute((3,), lambda i: tg.if_then_else((B[i] != 0) & (A[i] % B[i] == 1), 1, 0),
                      name="r")
    assert_matches(both, [A, B], [a, b])


def test_logical_ops_and_select():
    a, b = pairs("bool")
    x, y = pairs("float32")
    A = tg.placeholder(a.shape, dtype="bool", name="A")
    B = tg.placeholder(b.shape, dtype="bool", name="B")
    out = tg.compute(a.shape, lambda i: (A[i] & ~B[i]) | (~A[i] & B[i]), name="xor")
    assert_matches(out, [A, B], [a, b])
    X = tg.placeholder(x.shape, dtype="float32", name="X")
    Y = tg.placeholder(y.shape, dtype="float32", name="Y")
    sel = tg.compute(x.shape, lambda i: tg.if_then_else(X[i] < Y[i], X[i] * 2.0, -Y[i]),
                     name="sel")
    assert_matches(sel, [X, Y], [x, y])


# -- intrinsics -------------------------------------------------------------------------

FLOAT_ARGS = np.array(FLOAT_VALUES + [0.49999997, 1e-8, -40.0, 40.0, 100.0, -100.0, 0.25,
                                      1e5, -1e5, 4.5, -4.5, 5.5])


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_intrinsics(dtype):
    names = sorted(k for k, v in INTRINSICS.items() if v.arity == 1 and v.accepts(dtype))
    if dtype == "bool":
        assert names == []  # no intrinsic takes bools
        return
    x = FLOAT_ARGS.astype(dtype) if dtype in FLOATS else np.array(values(dtype), dtype=dtype)
    X = tg.placeholder(x.shape, dtype=dtype, name="X")
    outs = [tg.compute(x.shape, lambda i, name=name: tg.call(name, X[i]), name=name)
            for name in names]
    assert_matches(outs, [X], [x])


def _ulps(got, exact):
    """``|got - exact|`` in units of the float32 spacing at ``exact`` (finite ones)."""
    spacing = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    finite = np.isfinite(exact)
    return np.abs(got.astype(np.float64)[finite] - exact[finite]) / spacing[finite]


def _float32_samples(positive):
    rng = np.random.default_rng(7)
    parts = [rng.standard_normal(20000) * scale for scale in (1e-30, 1e-6, 0.1, 0.6, 1, 3, 30)]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.4e-45, 3.4e38, -3.4e38,
               0.625, -0.625, 0.62499994, 44.0, 44.5, 1.0, 0.70710677, 0.7071068,
               1 - 6e-8, 1 + 1.2e-7]
    x = np.concatenate(parts + [np.array(special)]).astype(np.float32)
    if positive:
        powers = np.float32(2.0) ** np.arange(-149, 128, dtype=np.float32)
        x = np.concatenate([np.abs(x), powers, powers * np.float32(1.5)]).astype(np.float32)
    return x


@pytest.mark.parametrize("name", ["log", "tanh"])
def test_inline_float32_log_and_tanh(name):
    # computed without a library call (so that their loops vectorise): within 2 ulp of the
    # exact value, the special values and zeros' signs as numpy's
    x = _float32_samples(positive=name == "log")
    X = tg.placeholder(x.shape, dtype="float32", name="X")
    f = tg.build([X], [tg.compute(x.shape, lambda i: getattr(tg, name)(X[i]), name="Y")],
                 threads=1)
    got = f(x)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        exact, numpy32 = getattr(np, name)(x.astype(np.float64)), getattr(np, name)(x)
    assert _ulps(got, exact).max() <= 2
    special = ~np.isfinite(numpy32) | (numpy32 == 0)
    np.testing.assert_array_equal(got[special], numpy32[special])
    assert (np.signbit(got[special]) == np.signbit(numpy32[special])).all()
    ir_text = f.llvm_ir
    assert f"@llvm.{name}." not in ir_text and f"@{name}f" not in ir_text
    assert "x float>" in ir_text


def test_inline_float32_erf():
    # computed without a library call (GELU's loops vectorise): within 6 ulp of the
    # C library's double erf (the rational approximation's measured error is 5.4), the
    # special values and zeros' signs as the evaluator's; float64 keeps the library's
    import math
    x = np.concatenate([_float32_samples(positive=False),
                        np.linspace(-5, 5, 4001, dtype=np.float32)]).astype(np.float32)
    X = tg.placeholder(x.shape, dtype="float32", name="X")
    Y = tg.compute(x.shape, lambda i: tg.erf(X[i]), name="Y")
    f = tg.build([X], [Y], threads=1)
    got = f(x)[0]
    exact = np.array([math.erf(float(v)) for v in x])
    assert _ulps(got, exact).max() <= 6
    evaluated = tg.evaluate([Y], {X: x})[0]
    special = ~np.isfinite(evaluated) | (evaluated == 0) | ~np.isfinite(x)
    np.testing.assert_array_equal(got[special], evaluated[special])
    assert (np.signbit(got[special]) == np.signbit(evaluated[special])).all()
    assert "@erf" not in f.llvm_ir and "x float>" in f.llvm_ir
    X64 = tg.placeholder((3,), dtype="float64", name="X")
    g = tg.build([X64], [tg.compute((3,), lambda i: tg.erf(X64[i]), name="Y")])
    assert "@erf" in g.llvm_ir


#: per binade ``[2**e, 2**(e+1))``, ``e = 0, 1, ..., 127``, the 24-bit mantissa ``M`` of the
#: float32 ``M * 2**(e - 23)`` nearest to a multiple of pi/2 (an exhaustive search of each
#: binade in 200-bit arithmetic): sin's and cos's hardest arguments, reduced to as little as
#: 2**-29 of a quarter turn (``16367173 * 2**72``)
NEAREST_TO_PI_HALVES = (
    13176795, 13176795, 9882596, 9882596, 9882596, 9882596, 9882596, 16573937, 16573937,
    16573937, 16573937, 9168424, 9168424, 9168424, 9168424, 13444207, 13444207, 13444207,
    8545886, 8545886, 8545886, 10838702, 10838702, 10838702, 15971451, 10695401, 10695401,
    10695401, 8681057, 9688229, 9688229, 9436436, 14406447, 16765556, 10741887, 10741887,
    10741887, 10741887, 10741887, 10741887, 11617958, 11617958, 11617958, 11617958, 11617958,
    16282999, 16282999, 16282999, 12069257, 12069257, 14431945, 15613289, 16203961, 16499297,
    16646965, 16720799, 16757716, 8895696, 8895696, 8895696, 8895696, 8895696, 8895696,
    8895696, 14946604, 14946604, 11209953, 16536939, 13873446, 13873446, 15473482, 15473482,
    15073473, 11405107, 11405107, 11405107, 9012376, 9012376, 9012376, 9012376, 9012376,
    9012376, 9012376, 13034427, 13034427, 10057457, 10057457, 10057457, 10057457, 14015064,
    14015064, 10511298, 8759415, 8759415, 8759415, 16367173, 16367173, 16367173, 16367173,
    16367173, 16367173, 12558490, 12558490, 12558490, 15080472, 13819481, 13819481, 15704540,
    9737329, 13663464, 10757867, 14173733, 14173733, 14173733, 11057283, 12615508, 12615508,
    9461631, 16567211, 9860544, 9860544, 15479557, 16712125, 16712125, 16712125, 16712125,
    12438944, 12438944)


def _trig_samples():
    """float32 arguments of sin and cos: random ones of every magnitude, the nearest to
    the first 40,000 multiples of pi/2 and to one in each binade, powers of two, their
    neighbours and negatives, and the special values."""
    rng = np.random.default_rng(11)
    magnitudes = np.exp(rng.uniform(np.log(1e-40), np.log(3.4e38), 100000))
    random = [rng.uniform(-10, 10, 100000), rng.uniform(-1e4, 1e4, 50000),
              magnitudes * rng.choice([-1.0, 1.0], magnitudes.size)]
    hardest = np.array(NEAREST_TO_PI_HALVES) * 2.0 ** (np.arange(128) - 23)
    powers = 2.0 ** np.arange(-149, 128)
    base = np.concatenate([np.arange(1, 40001) * (np.pi / 2), hardest, powers]).astype(np.float32)
    inf = np.float32(np.inf)
    structured = np.concatenate([base, np.nextafter(base, inf), np.nextafter(base, -inf)])
    special = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, 1e-45])
    return np.concatenate(random + [structured, -structured, special]).astype(np.float32)


def _two_over_pi_bits(bits):
    """``floor(2/pi * 2**bits)``, from pi by Machin's formula in integers."""
    guard = bits + 64
    one = 1 << guard

    def arctan_of_inverse(n):
        total, term, k = 0, one // n, 0
        while term:
            total += (-1) ** k * (term // (2 * k + 1))
            term //= n * n
            k += 1
        return total

    pi = 16 * arctan_of_inverse(5) - 4 * arctan_of_inverse(239)  # pi * 2**guard
    return (2 << (guard + bits)) // pi


def test_sin_cos_table_holds_the_bits_of_two_over_pi():
    from tegrad.codegen.llvm.trig import _TWO_OVER_PI_HEX, _TWO_OVER_PI_WORDS
    assert int(_TWO_OVER_PI_HEX, 16) == _two_over_pi_bits(192)
    bits = _two_over_pi_bits(192)
    for i, word in enumerate(_TWO_OVER_PI_WORDS):  # the 32 bits up to bit 8 * (i + 1)
        assert word == (bits >> (192 - 8 * (i + 1))) % 2**32


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_inline_float32_sin_and_cos(name):
    # computed without a library call (their loops vectorise): within 2 ulp of the exact
    # value (measured: 1.49 for sin, 1.50 for cos, as tegrad.codegen.llvm.trig documents) on
    # arguments of every magnitude up to 3.4e38 and the hardest ones; sin(+-0) = +-0,
    # cos(+-0) = 1, NaN for NaN and +-inf, as numpy; float64 keeps the library's
    x = _trig_samples()
    X = tg.placeholder(x.shape, dtype="float32", name="X")
    Y = tg.compute(x.shape, lambda i: getattr(tg, name)(X[i]), name="Y")
    f = tg.build([X], [Y], threads=1)
    got = f(x)[0]
    with np.errstate(invalid="ignore"):
        exact = getattr(np, name)(x.astype(np.float64))
    assert _ulps(got, exact).max() <= 2
    assert (got[x == 0] == (0 if name == "sin" else 1)).all()
    assert (np.signbit(got[x == 0]) == (np.signbit(x[x == 0]) & (name == "sin"))).all()
    assert np.isnan(got[~np.isfinite(x)]).all()
    evaluated = tg.evaluate([Y], {X: x})[0]
    np.testing.assert_allclose(got, evaluated, rtol=0, atol=3e-7)  # |sin| <= 1: 2.5 ulp of 1
    ir_text = f.llvm_ir
    assert f"@llvm.{name}." not in ir_text and f"@{name}f" not in ir_text
    assert re.search(r"fmul contract <\d+ x float>", ir_text)  # the polynomial vectorised
    X64 = tg.placeholder((3,), dtype="float64", name="X")
    g = tg.build([X64], [tg.compute((3,), lambda i: getattr(tg, name)(X64[i]), name="Y")])
    assert f"@llvm.{name}.f64" in g.llvm_ir or f"@{name}(" in g.llvm_ir


@pytest.mark.parametrize("exponent", [0.25, 0.75, 1.25, 1.5, 2.5, -0.25, -0.5, -0.75, 0.5,
                                      1.75, 3.0])
def test_float32_power_by_quarters_from_square_roots(exponent):
    # x ** (k / 4) for the quarters of ROOT_POWER_QUARTERS is computed from square roots
    # (its loop vectorises): within 2 ulp of the exact value, numpy's special values and
    # zeros' signs; 0.5 is a square root, as numpy computes it (-0 -> -0, -inf -> nan);
    # other exponents (1.75, integers) keep the library call
    x = np.concatenate([_float32_samples(positive=True), -_float32_samples(positive=True),
                        np.float32([np.inf, -np.inf, 0.0, -0.0, np.nan])])
    X = tg.placeholder(x.shape, dtype="float32", name="X")
    Y = tg.compute(x.shape, lambda i: tg.power(X[i], exponent), name="Y")
    f = tg.build([X], [Y], threads=1)
    got = f(x)[0]
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), exponent)
        numpy32 = tg.evaluate([Y], {X: x})[0]
    normal = np.isfinite(exact) & (np.abs(exact) >= np.finfo(np.float32).tiny) & \
        (np.abs(exact) <= np.finfo(np.float32).max)
    assert _ulps(got[normal], exact[normal]).max() <= 2
    special = ~np.isfinite(numpy32) | (numpy32 == 0) | ~np.isfinite(x) | (x == 0)
    np.testing.assert_array_equal(got[special], numpy32[special])
    signed = special & ~np.isnan(numpy32)
    assert (np.signbit(got[signed]) == np.signbit(numpy32[signed])).all()
    # results beyond float32's normal range: within 2 of its spacing there
    rest = ~normal & ~special
    assert (np.abs(got[rest] - numpy32[rest]) <= 2 * np.spacing(np.abs(numpy32[rest]))).all()
    by_roots = exponent * 4 in ROOT_POWER_QUARTERS or exponent == 0.5
    assert ("@llvm.pow." not in f.llvm_ir and "@powf" not in f.llvm_ir) == by_roots


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_power(dtype):
    a, b = pairs(dtype)
    A = tg.placeholder(a.shape, dtype=dtype, name="A")
    B = tg.placeholder(b.shape, dtype=dtype, name="B")
    out = tg.compute(a.shape, lambda i: tg.power(A[i], B[i]), name="P")
    assert_matches(out, [A, B], [a, b])


@pytest.mark.parametrize("dtype", INTS)
def test_integer_power(dtype):
    # numpy refuses negative integer exponents, so the evaluator has no value for them
    a, b = pairs(dtype, keep=lambda a, b: 0 <= b <= 70)
    A = tg.placeholder(a.shape, dtype=dtype, name="A")
    B = tg.placeholder(b.shape, dtype=dtype, name="B")
    out = tg.compute(a.shape, lambda i: tg.power(A[i], B[i]), name="P")
    assert_matches(out, [A, B], [a, b])


def test_round_ties_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5], dtype="float32")
    X = tg.placeholder(x.shape, dtype="float32", name="X")
    out = tg.compute(x.shape, lambda i: tg.round(X[i]), name="Y")
    assert run_compiled(out, [X], [x]).tolist() == [0, 2, 2, -0, -2, -2, 4]


def test_max_and_min_propagate_nan():
    x = np.array([np.nan, 1.0, np.nan], dtype="float64")
    y = np.array([1.0, np.nan, np.nan], dtype="float64")
    X = tg.placeholder((3,), dtype="float64", name="X")
    Y = tg.placeholder((3,), dtype="float64", name="Y")
    for fn in (tg.max, tg.min):
        out = tg.compute((3,), lambda i: fn(X[i], Y[i]), name="M")
        assert np.isnan(run_compiled(out, [X, Y], [x, y])).all()


# -- conversions ------------------------------------------------------------------------


@pytest.mark.parametrize("src", DTYPES)
def test_casts(src):
    x = (np.array(FLOAT_VALUES, dtype=src) if src in FLOATS
         else np.array(values(src), dtype=src))
    X = tg.placeholder(x.shape, dtype=src, name="X")
    outs = [tg.compute(x.shape, lambda i, dst=dst: tg.cast(X[i], dst), name=dst)
            for dst in DTYPES]
    assert_matches(outs, [X], [x])


def _half_rounding_cases(rng):
    """Doubles whose rounding to float16 is hard: just above and below the midpoints of
    consecutive halves (normal and subnormal; rounded to float first, they would land on
    the midpoint and round to even), the midpoints themselves, the overflow threshold,
    random doubles over the whole range, and the non-finite values and zeros."""
    halves = rng.integers(0, 0x7C00, 3000, dtype=np.uint16).view(np.float16)
    low = halves.astype(np.float64)
    high = np.nextafter(halves, np.float16(np.inf)).astype(np.float64)
    mid = (low + high) / 2
    tiny = np.abs(mid) * 2.0 ** -40 + 2.0 ** -1070
    cases = [mid, mid + tiny, mid - tiny, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
             rng.uniform(-7e4, 7e4, 2000), rng.standard_normal(1000) * 2.0 ** -20,
             [65504.0, 65519.99999999999, 65520.0, 1e300, 5e-324, 2.0 ** -25,
              np.nextafter(2.0 ** -25, 1.0), np.inf, -np.inf, np.nan, 0.0, -0.0]]
    x = np.concatenate([np.asarray(c, np.float64) for c in cases])
    return np.concatenate([x, -x])


def test_doubles_round_to_float16_once_as_numpy_rounds_them():
    """A cast from float64 to float16 (and a float16 intrinsic computed in double) rounds
    once, to nearest, ties to even: bit for bit numpy's ``astype``, vectorised or not
    (LLVM's own truncation calls ``__truncdfhf2``, which the JIT does not have)."""
    x = _half_rounding_cases(np.random.default_rng(5))
    X = tg.placeholder(x.shape, dtype="float64", name="X")
    out = tg.compute(x.shape, lambda i: tg.cast(X[i], "float16"), name="half")
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    for threads in (1, 2):
        got = tg.build([X], [out], threads=threads)(x)[0]
        np.testing.assert_array_equal(got.view(np.uint16) & 0x7FFF == 0x7E00,
                                      np.isnan(want))
        finite = ~np.isnan(want)
        np.testing.assert_array_equal(got.view(np.uint16)[finite], want.view(np.uint16)[finite])


@pytest.mark.parametrize("name", ["exp", "expm1", "log1p", "asinh", "acosh", "atanh", "erf",
                                  "tanh", "sigmoid", "log"])
def test_float16_intrinsics_computed_wider_run_and_round(name):
    """float16 operands of intrinsics computed in double or float32, compiled (in loops
    LLVM vectorises), equal the evaluator to half a float16 ulp."""
    x = np.concatenate([np.linspace(-12, 12, 1001), [0.0, -0.0, 1.0, 0.5, 65504.0, -65504.0,
                                                      np.inf, -np.inf, np.nan]])
    x = x.astype(np.float16)
    X = tg.placeholder(x.shape, dtype="float16", name="X")
    out = tg.compute(x.shape, lambda i: tg.call(name, X[i]), name=name)
    with np.errstate(all="ignore"):
        want = tg.evaluate(out, {X: x})
        got = tg.build([X], [out], threads=1)(x)[0]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3,
                               atol=0, equal_nan=True, err_msg=name)


def test_float_to_int_cast_of_non_finite_values_is_zero():
    x = np.array([np.nan, np.inf, -np.inf, 2.7], dtype="float32")
    X = tg.placeholder((4,), dtype="float32", name="X")
    out = tg.compute((4,), lambda i: tg.cast(X[i], "int32"), name="Y")
    assert run_compiled(out, [X], [x]).tolist() == [0, 0, 0, 2]


def test_integer_index_arithmetic_wraps_like_the_evaluator():
    # index variables are int64 in the evaluator; narrower results wrap like astype
    outs = [tg.compute((300,), lambda i, d=d: tg.cast(i * 1000003 - 7, d), name=d)
            for d in ("int8", "uint8", "int16", "int32", "int64", "bool", "float32")]
    assert_matches(outs, [], [])


# -- reassociation of float sums: vector accumulators only -------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_reassociated_sums_differ_only_by_rounding(dtype):
    """A sum along the stride-1 axis runs in vector accumulators (the schedule's lanes,
    no fast-math flag): it differs from the evaluator's by rounding only."""
    X = tg.placeholder((1003,), dtype=dtype, name="X")
    k = tg.reduce_axis((0, 1003), name="k")
    S = tg.compute((), lambda: tg.sum(X[k], axis=k), name="S")
    f = tg.build([X], [S])
    assert re.search(r"fadd <\d+ x", f.llvm_ir)  # it vectorised
    assert "reassoc" not in f.llvm_ir
    rng = np.random.default_rng(3)
    base = rng.standard_normal(1003)
    specials = {"none": {}, "nan": {500: np.nan}, "inf": {7: np.inf},
                "both infinities": {3: np.inf, 1000: -np.inf}, "huge": {10: 3e38, 11: 3e38}}
    for label, where in specials.items():
        x = base.astype(dtype)
        for pos, v in where.items():
            x[pos] = v
        (got,) = f(x)
        want = tg.evaluate(S, {X: x})
        if np.isfinite(want) and label != "huge":
            exact = np.sum(x.astype(np.float64))
            assert abs(float(got) - exact) <= 1003 * np.finfo(dtype).eps * np.sum(np.abs(x)), label
        else:
            np.testing.assert_array_equal(got, want, err_msg=label)
    (zero,) = f(np.full(1003, -0.0, dtype=dtype))
    assert zero == 0 and np.signbit(zero) == np.signbit(tg.evaluate(S, {X: np.full(1003, -0.0,
                                                                                     dtype=dtype)}))
