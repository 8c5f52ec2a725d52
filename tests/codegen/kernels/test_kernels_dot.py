"""The dot-product kernel against numpy: random products whose reduction is rows of runs
(random row offsets, column tables, batch tables), block shapes that do not divide the
outputs, both float dtypes, several thread counts with bit-identical results; the
detection of its layout and the choice between it and the gemm kernel."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.target import jit
from tegrad.codegen.kernels.dot import (DotBlocking, DotLayout, compile_dot, dot_blocking,
                                        dot_layout, prefers_dot)
from tegrad.codegen.kernels.gemm import GemmSpec
from tegrad.codegen.loops.interpret import matrix_product_indices

EPS = {"float32": np.finfo(np.float32).eps, "float64": np.finfo(np.float64).eps}
VL = {"float32": jit.vector_bits() // 32, "float64": jit.vector_bits() // 64}


def run_spec(spec, a, b, threads=1, blocking=None):
    """The kernel's C (a fresh array of the spec's reach, NaN where it writes nothing)."""
    (_, _), (_, _), (_, chi) = spec.spans()
    c = np.full(chi + 1, np.nan, spec.dtype)
    f = compile_dot(spec, blocking, min_flops_per_thread=1)
    f.call_pointers(a.ctypes.data, b.ctypes.data, c.ctypes.data, threads)
    return c


def check_close(spec, a, b, c):
    """``c`` equals the product up to the rounding of a sum of ``k`` products, and holds
    NaN wherever the spec does not write."""
    a_at, b_at, c_at = matrix_product_indices(spec)
    a64, b64 = a[a_at].astype(np.float64), b[b_at].astype(np.float64)
    ref = np.matmul(a64, b64)
    bound = 4 * (spec.k + 2) * EPS[spec.dtype] * np.matmul(np.abs(a64), np.abs(b64)) + 1e-300
    got = c[c_at]
    assert np.all(np.abs(got - ref) <= bound), np.max(np.abs(got - ref) / bound)
    untouched = np.ones(c.size, bool)
    untouched[c_at.reshape(-1)] = False
    assert np.isnan(c[untouched]).all()


@st.composite
def products(draw):
    """A random spec with a dot layout and operands reaching every element it reads."""
    dtype = draw(st.sampled_from(["float32", "float64"]))
    batch, m, n = draw(st.integers(1, 3)), draw(st.integers(1, 13)), draw(st.integers(1, 13))
    run = draw(st.integers(2, 3 * VL[dtype] + 2))
    rows = draw(st.integers(1, 6))
    if rows == 1 and draw(st.booleans()):
        k_offsets, sa2, sb1 = None, 1, 1
    else:
        # rows apart by more than a run: the first run is where the table's first break is
        gaps = [draw(st.lists(st.integers(run + 1, run + 7), min_size=rows - 1,
                              max_size=rows - 1)) for _ in range(2)]
        starts = [np.concatenate([[0], np.cumsum(g)]).astype(int) for g in gaps]
        k_offsets = tuple((int(sa) + t, int(sb) + t) for sa, sb in zip(*starts)
                          for t in range(run))
        sa2 = sb1 = 0
    k = run * rows
    a_reach = k * 8 + 8
    sa1 = draw(st.integers(0, a_reach))
    n_table = draw(st.booleans())
    n_offsets = tuple(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))) \
        if n_table else None
    sb2 = 0 if n_table else draw(st.integers(0, 9))
    a_p, b_p = draw(st.integers(0, 50)), draw(st.integers(0, 50))
    batch_offsets = None
    if draw(st.booleans()):
        batch_offsets = tuple((p * a_p, p * b_p, (batch - 1 - p) * m * n) for p in range(batch))
    spec = GemmSpec(dtype, batch, m, n, k, (a_p, sa1, sa2), (b_p, sb1, sb2), (m * n, n, 1),
                    k_offsets=k_offsets, batch_offsets=batch_offsets, n_offsets=n_offsets)
    (_, ahi), (_, bhi), _ = spec.spans()
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = rng.standard_normal(ahi + 1).astype(dtype)
    b = rng.standard_normal(bhi + 1).astype(dtype)
    return spec, a, b


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(case=products(), threads=st.sampled_from([1, 2, 3]),
       shape=st.tuples(st.integers(1, 5), st.integers(1, 5)) | st.none())
def test_random_products_match_numpy(case, threads, shape):
    spec, a, b = case
    assert dot_layout(spec) is not None
    blocking = None if shape is None else DotBlocking(VL[spec.dtype], *shape)
    check_close(spec, a, b, run_spec(spec, a, b, threads, blocking))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (32, 10, 6760), (7, 3, 17), (13, 11, 64)])
def test_dense_logits_shapes(dtype, m, n, k):
    # C = x @ w.T, x (m, k) and w (n, k) both read along k
    spec = GemmSpec(dtype, 1, m, n, k, (0, k, 1), (0, 1, k), (0, n, 1))
    rng = np.random.default_rng(m * n * k)
    x, w = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    c = run_spec(spec, x, w, threads=2)
    check_close(spec, x.reshape(-1), w.reshape(-1), c)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_thread_counts_give_identical_bits(dtype):
    m, n, run, rows = 11, 9, 45, 20
    table = tuple((r * 50 + t, r * 47 + t) for r in range(rows) for t in range(run))
    spec = GemmSpec(dtype, 1, m, n, run * rows, (0, 1000, 0), (0, 0, 3), (0, n, 1),
                    k_offsets=table)
    rng = np.random.default_rng(5)
    a = rng.standard_normal(11000).astype(dtype)
    b = rng.standard_normal(1000).astype(dtype)
    first = run_spec(spec, a, b, threads=1)
    for threads in (2, 3, 8):
        assert np.array_equal(run_spec(spec, a, b, threads=threads), first)


def test_nan_and_inf_propagate():
    m, n, k = 5, 4, 40
    spec = GemmSpec("float64", 1, m, n, k, (0, k, 1), (0, 1, k), (0, n, 1))
    a, b = np.ones((m, k)), np.zeros((n, k))
    a[1, 33], b[2, 7] = np.inf, np.nan
    b[3, 33] = 1.0
    c = run_spec(spec, a.reshape(-1), b.reshape(-1))[:m * n].reshape(m, n)
    with np.errstate(invalid="ignore"):
        ref = a @ b.T
    assert np.array_equal(np.isnan(c), np.isnan(ref)) and np.isinf(c[1, 3])
    assert np.array_equal(c[~np.isnan(c)], ref[~np.isnan(ref)])


def test_layout_of_tables():
    dense = GemmSpec.dense("float32", 4, 5, 6)
    assert dot_layout(dense) is None  # B's reduction stride is 5
    rows = GemmSpec("float32", 1, 2, 2, 6, (0, 9, 0), (0, 0, 1), (0, 2, 1),
                    k_offsets=((0, 0), (1, 1), (2, 2), (10, 20), (11, 21), (12, 22)))
    assert dot_layout(rows) == DotLayout(3, ((0, 0), (10, 20)))
    ragged = GemmSpec("float32", 1, 2, 2, 5, (0, 9, 0), (0, 0, 1), (0, 2, 1),
                      k_offsets=((0, 0), (1, 1), (2, 2), (10, 20), (11, 21)))
    assert dot_layout(ragged) is None  # rows of 3, then of 2
    skewed = GemmSpec("float32", 1, 2, 2, 4, (0, 9, 0), (0, 0, 1), (0, 2, 1),
                      k_offsets=((0, 0), (1, 1), (10, 20), (11, 22)))
    assert dot_layout(skewed) is None  # the second row's B is not consecutive


def test_choice_between_the_kernels():
    def logits(m, n, k):
        return GemmSpec("float32", 1, m, n, k, (0, k, 1), (0, 1, k), (0, n, 1))

    def prefers(spec):
        return prefers_dot(spec, dot_layout(spec), vector_bits=512)

    assert prefers(logits(32, 10, 6760))
    # wide outputs fill the gemm's registers; short sums do not pay for the lane sums
    assert not prefers(logits(256, 256, 6760))
    assert not prefers(logits(32, 10, 128))
    # a run of 17 fills 17 of 32 lanes
    table = tuple((r * 20 + t, r * 20 + t) for r in range(64) for t in range(17))
    sparse = GemmSpec("float32", 1, 4, 4, len(table), (0, 2000, 0), (0, 0, 2000),
                      (0, 4, 1), k_offsets=table)
    assert not prefers(sparse)


def test_blocking_fits_the_registers_and_the_outputs():
    spec = GemmSpec("float32", 1, 32, 10, 64, (0, 64, 1), (0, 1, 64), (0, 10, 1))
    assert dot_blocking(spec, vector_bits=512) == DotBlocking(16, 4, 5)
    for bits, registers in ((512, 32), (256, 16)):
        blk = dot_blocking(GemmSpec("float32", 1, 100, 100, 64, (0, 64, 1), (0, 1, 64),
                                    (0, 100, 1)), vector_bits=bits)
        assert blk.mr * blk.nr + blk.mr + 1 <= registers
    tiny = dot_blocking(GemmSpec("float64", 1, 1, 2, 64, (0, 64, 1), (0, 1, 64), (0, 2, 1)),
                        vector_bits=512)
    assert (tiny.mr, tiny.nr) == (1, 2)


def test_built_stages_run_on_the_dot_kernel():
    # conv -> flatten -> dense: the logits and the convolution's weight gradient
    # (the weight gradient's sums: runs of 26 output columns, one per image row)
    x = tg.placeholder((4, 3, 28, 28), name="x")
    wc = tg.placeholder((5, 3, 3, 3), name="wc")
    wd = tg.placeholder((7, 5 * 26 * 26), name="wd")
    labels = tg.placeholder((4,), dtype="int64", name="labels")
    logits = nn.dense(ops.flatten(nn.conv2d(x, wc)), wd)
    loss = nn.softmax_cross_entropy(logits, labels)
    dwc, dwd = tg.differentiate(loss, [wc, wd])
    f = tg.build([x, labels, wc, wd], [logits, dwc, dwd], threads=2)
    assert str(f.schedule).count("dot kernel") == 2, f.schedule
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(x.shape).astype("float32"), rng.integers(0, 7, 4),
            rng.standard_normal(wc.shape).astype("float32"),
            rng.standard_normal(wd.shape).astype("float32")]
    want = tg.evaluate([logits, dwc, dwd], dict(zip([x, labels, wc, wd], args)))
    for got, ref in zip(f(*args), want):
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)


GUARDED_SCRIPT = r"""
import ctypes, mmap
import numpy as np
from tegrad.codegen.kernels.dot import DotBlocking, compile_dot
from tegrad.codegen.kernels.gemm import GemmSpec

libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []


def before_a_guard_page(values):
    # values copied to the end of a mapping whose next page can be neither read nor written
    pages = -(-values.nbytes // mmap.PAGESIZE) + 1
    mm = mmap.mmap(-1, pages * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    assert libc.mprotect(base + (pages - 1) * mmap.PAGESIZE, mmap.PAGESIZE, 0) == 0
    out = np.frombuffer(mm, values.dtype, values.size,
                        (pages - 1) * mmap.PAGESIZE - values.nbytes)
    out[:] = values.reshape(-1)
    keep.append(mm)
    return out


m, n, k = 5, 3, 40
spec = GemmSpec("float32", 1, m, n, k, (0, k, 1), (0, 1, k), (0, n, 1))
rng = np.random.default_rng(1)
x, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((n, k)).astype("float32")
xa, wa = before_a_guard_page(x), before_a_guard_page(w)
c = before_a_guard_page(np.zeros(m * n, np.float32))
f = compile_dot(spec, DotBlocking(16, 4, 2), min_flops_per_thread=1)
f.call_pointers(xa.ctypes.data, wa.ctypes.data, c.ctypes.data, 2)
assert np.allclose(c.reshape(m, n), x @ w.T, rtol=1e-5, atol=1e-5)
print("ok")
"""


def test_blocks_past_the_edges_read_and_write_inside_the_operands():
    # blocks of 4 x 2 over 5 x 3 outputs: the last blocks' rows 5-7 and column 3 are
    # past the operands, which end where an unreadable page begins
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", GUARDED_SCRIPT], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


EXPORTED_SCRIPT = r"""
import ctypes, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])


def aligned(values):
    raw = np.zeros(values.nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    out = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


x, w = (aligned(np.load(p)) for p in sys.argv[2:4])
out = aligned(np.zeros((x.shape[0], w.shape[0]), np.float32))
work = aligned(np.zeros(int(sys.argv[5]) + 1, np.uint8))
status = lib.logits(*(ctypes.c_void_p(a.ctypes.data) for a in (x, w, out, work)))
np.save(sys.argv[4], out)
print(status)
"""


def test_exported_library_runs_the_dot_kernel(tmp_path):
    import subprocess
    import sys
    from tegrad.codegen.export.program import export
    x, w = tg.placeholder((6, 900), name="x"), tg.placeholder((5, 900), name="w")
    logits = nn.dense(x, w)
    assert "dot kernel" in tg.build([x, w], [logits]).schedule
    result = export([x, w], [logits], tmp_path / "logits", threads=2)
    assert result.library_path is not None, "no linker for the host"
    rng = np.random.default_rng(2)
    xs, ws = (rng.standard_normal(t.shape).astype("float32") for t in (x, w))
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "w.npy", ws)
    done = subprocess.run([sys.executable, "-c", EXPORTED_SCRIPT, str(result.library_path),
                           str(tmp_path / "x.npy"), str(tmp_path / "w.npy"),
                           str(tmp_path / "out.npy"), str(result.entries[0].workspace_bytes)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), xs @ ws.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, n, k", [(1, 3, 700), (5, 2, 129), (3, 7, 64)])
def test_an_accumulating_dot_product_adds_to_c(dtype, m, n, k):
    # B stored by columns: both operands' reduction runs are contiguous
    spec = GemmSpec(dtype, 1, m, n, k, (0, k, 1), (0, 1, k), (0, n, 1), accumulate=True)
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal(m * k).astype(dtype)
    b = rng.standard_normal(k * n).astype(dtype)
    c0 = rng.standard_normal(m * n).astype(dtype)
    c = c0.copy()
    compile_dot(spec, None, min_flops_per_thread=1).call_pointers(
        a.ctypes.data, b.ctypes.data, c.ctypes.data, 2)
    a_at, b_at, c_at = matrix_product_indices(spec)
    ref = np.matmul(a[a_at].astype(np.float64), b[b_at].astype(np.float64)) + c0[c_at]
    np.testing.assert_allclose(c[c_at], ref, rtol=1e-4 if dtype == "float32" else 1e-12,
                               atol=1e-4 if dtype == "float32" else 1e-12)
