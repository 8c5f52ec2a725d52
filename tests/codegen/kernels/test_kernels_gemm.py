"""The register-blocked gemm kernel against numpy: random shapes (edges that do not
divide the blocks, K = 1, M or N = 1), both float dtypes, strided and broadcast
operands, several thread counts, bit-identical results for every thread count."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tegrad.codegen.target import jit
from tegrad.codegen.kernels.gemm import (Blocking, GemmSpec, compile_gemm, default_blocking,
                                         emit_gemm, pack_space_bytes)
from tegrad.ir.errors import ShapeError, TegradError

EPS = {"float32": np.finfo(np.float32).eps, "float64": np.finfo(np.float64).eps}


def pooled_gemm(spec, blocking=None):
    """The compiled kernel, threaded however small the product (to test the pool)."""
    return compile_gemm(spec, blocking, min_flops_per_thread=1)


def check_close(c, a, b, k):
    """``c`` equals ``a @ b`` up to the rounding a sum of ``k`` products may carry."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.matmul(a64, b64)
    bound = 4 * (k + 2) * EPS[str(c.dtype)] * np.matmul(np.abs(a64), np.abs(b64)) + 1e-300
    assert np.all(np.abs(c - ref) <= bound), np.max(np.abs(c - ref) / bound)


def small_blocking(dtype):
    """Tiny cache blocks, so small shapes cross many reduction and column blocks."""
    host = default_blocking(dtype)
    return Blocking(host.vl, host.mr, host.nr, kc=3, nc=2 * host.nr)


SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(dtype=st.sampled_from(["float32", "float64"]),
       m=st.integers(1, 40), n=st.integers(1, 70), k=st.integers(1, 300),
       batch=st.integers(1, 3), small=st.booleans(), threads=st.sampled_from([1, 2, 3]),
       seed=st.integers(0, 2**16))
def test_random_shapes_match_numpy(dtype, m, n, k, batch, small, threads, seed):
    spec = GemmSpec.dense(dtype, m, n, k, batch=batch)
    f = pooled_gemm(spec, small_blocking(dtype) if small else None)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(dtype)
    b = rng.standard_normal((batch, k, n)).astype(dtype)
    c = np.full((batch, m, n), np.nan, dtype)
    f.call_raw(a, b, c, threads)
    check_close(c, a, b, k)


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (1, 37, 5), (29, 1, 4), (6, 16, 1),
                                     (7, 17, 257), (12, 48, 256), (64, 64, 64)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_edge_shapes(dtype, m, n, k):
    f = pooled_gemm(GemmSpec.dense(dtype, m, n, k))
    rng = np.random.default_rng(m * n * k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    check_close(f(a, b), a, b, k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transposed_and_broadcast_operands(dtype):
    # C[p, i, j] = sum_k A[k, i] * Bt[j, k]: A read k-major and shared by every batch.
    batch, m, n, k = 3, 13, 21, 19
    spec = GemmSpec(dtype, batch, m, n, k, a_strides=(0, 1, m), b_strides=(n * k, 1, k),
                    c_strides=(m * n, n, 1))
    f = pooled_gemm(spec)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((k, m)).astype(dtype)
    bt = rng.standard_normal((batch, n, k)).astype(dtype)
    c = np.empty((batch, m, n), dtype)
    f.call_raw(a, bt, c, threads=2)
    check_close(c, np.broadcast_to(a.T, (batch, m, k)), bt.transpose(0, 2, 1), k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_thread_counts_give_identical_bits(dtype):
    m, n, k = 53, 45, 300
    f = pooled_gemm(GemmSpec.dense(dtype, m, n, k))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    first = f(a, b, threads=1)
    for threads in (1, 2, 3, 8):
        assert np.array_equal(f(a, b, threads=threads), first)


def test_nan_and_inf_propagate():
    f = pooled_gemm(GemmSpec.dense("float64", 5, 9, 4))
    a = np.ones((5, 4))
    b = np.ones((4, 9))
    a[1, 2], b[3, 4] = np.nan, np.inf
    c = f(a, b)
    ref = a @ b
    assert np.array_equal(np.isnan(c), np.isnan(ref)) and np.array_equal(c[~np.isnan(c)],
                                                                         ref[~np.isnan(ref)])


def test_arguments_are_checked():
    f = pooled_gemm(GemmSpec.dense("float32", 4, 5, 6))
    a, b = np.ones((4, 6), np.float32), np.ones((6, 5), np.float32)
    with pytest.raises(ShapeError, match="B must be"):
        f.call_raw(a, b[:3], np.empty((4, 5), np.float32))
    with pytest.raises(ShapeError, match="A must be"):
        f.call_raw(a.astype(np.float64), b, np.empty((4, 5), np.float32))
    with pytest.raises(ShapeError, match="stride 1"):
        GemmSpec("float32", 1, 2, 2, 2, (4, 2, 1), (4, 2, 1), (4, 1, 2))
    with pytest.raises(TegradError, match="float32 or float64"):
        GemmSpec.dense("int32", 2, 2, 2)


def test_blocking_follows_the_vector_width():
    assert default_blocking("float32", vector_bits=512) == Blocking(16, 8, 32, 256, 256)
    assert default_blocking("float64", vector_bits=512).vl == 8
    assert default_blocking("float32", vector_bits=256).vl == 8
    assert default_blocking("float64", vector_bits=256).nr == 8
    import llvmlite.ir as ir
    m = ir.Module()
    emit_gemm(m, GemmSpec.dense("float32", 8, 32, 4), blocking=default_blocking(
        "float32", vector_bits=512))
    assert "llvm.fma.v16f32" in str(m)
    assert jit.vector_bits() in (128, 256, 512)


def test_a_module_with_its_own_pool_runs_and_exports():
    # What an exported library holds: the kernel and a pool of its own, no Python.
    import ctypes

    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    from tegrad.codegen.runtime import thread_pool as threadpool
    m = ir.Module(name="exported")
    spec = GemmSpec.dense("float64", 37, 29, 41)
    emit_gemm(m, spec, name="mm")
    threadpool.emit_thread_pool(m)
    engine = jit.compile_module(m)
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p, ctypes.c_int32)(engine.get_function_address("mm"))
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((37, 41)), rng.standard_normal((41, 29))
    c = np.empty((37, 29))
    for threads in (1, 2, 3):
        # the caller's packing space, at any alignment (here 1 byte past a line)
        space = np.empty(pack_space_bytes(spec, threads) + 1, np.uint8)[1:]
        f(a.ctypes.data, b.ctypes.data, c.ctypes.data, space.ctypes.data, threads)
        check_close(c, a, b, 41)
    obj = jit.host_target_machine().emit_object(llvm.parse_assembly(str(m)))
    assert b"tegrad_parallel_for" in obj and b"pthread_create" in obj
    assert b"malloc" not in obj and b"free" not in obj  # the caller's space, nothing else


def test_negative_strides_need_a_base_pointer():
    # C[i, j] = sum_k A[m-1-i, k] B[k, j]: fine through the address with a base pointer,
    # refused by call_raw (which passes each array's first element)
    m, n, k = 5, 9, 3
    spec = GemmSpec("float32", 1, m, n, k, (0, -k, 1), (0, n, 1), (0, n, 1))
    f = pooled_gemm(spec)
    a = np.arange(m * k, dtype=np.float32).reshape(m, k)
    b = np.ones((k, n), np.float32)
    with pytest.raises(ShapeError, match="negative strides"):
        f.call_raw(a, b, np.empty((m, n), np.float32))
    c = np.empty((m, n), np.float32)
    f.call_pointers(a.ctypes.data + (m - 1) * k * 4, b.ctypes.data, c.ctypes.data, 2)
    check_close(c, a[::-1], b, k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_offset_tables_for_reduction_and_batch(dtype):
    # C[p, i, j] = sum_k A[i, perm[k]] * B[perm[k], j] + batch p at arbitrary offsets
    rng = np.random.default_rng(11)
    batch, m, n, k = 3, 7, 19, 300
    perm = rng.permutation(k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((batch, k, n)).astype(dtype)
    order = [2, 0, 1]
    spec = GemmSpec(dtype, batch, m, n, k, (0, k, 0), (0, 0, 1), (0, n, 1),
                    k_offsets=tuple((int(q), int(q) * n) for q in perm),
                    batch_offsets=tuple((0, p * k * n, q * m * n) for q, p in enumerate(order)))
    c = np.empty((batch, m, n), dtype)
    pooled_gemm(spec, small_blocking(dtype)).call_raw(a, b, c, threads=2)
    check_close(c, np.broadcast_to(a, (batch, m, k)), b[order], k)
    with pytest.raises(ShapeError, match="reduction offsets"):
        GemmSpec(dtype, 1, 2, 2, 3, (0, 3, 1), (0, 2, 1), (0, 2, 1), k_offsets=((0, 0),))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("blocking", ["host", "small"])
def test_column_offset_tables_with_consecutive_and_scattered_strips(dtype, blocking):
    # C[i, j] = sum_k A[i, k] * B[k, cols[j]]: runs of consecutive columns (strips packed
    # a vector per row), one strip whose run breaks in its middle, a descending run, a
    # stride-2 run and a last partial strip
    blk = default_blocking(dtype) if blocking == "host" else small_blocking(dtype)
    nr = blk.nr
    rng = np.random.default_rng(12)
    cols = (list(range(5, 5 + nr)) + list(range(100, 100 + nr // 2))
            + list(range(300, 300 + nr - nr // 2)) + list(range(2 * nr + 400, 400, -1))[:nr]
            + list(range(600, 600 + 2 * nr, 2)) + list(range(40, 40 + nr // 2 + 3)))
    m, n, k, width = 11, len(cols), 21, 700
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, width)).astype(dtype)
    spec = GemmSpec(dtype, 1, m, n, k, (0, k, 1), (0, width, 0), (0, n, 1),
                    n_offsets=tuple(cols))
    c = np.empty((1, m, n), dtype)
    for threads in (1, 2):
        pooled_gemm(spec, blk).call_raw(a, b, c, threads=threads)
        check_close(c[0], a, b[:, cols], k)


@SETTINGS
@given(runs=st.lists(st.tuples(st.integers(0, 699), st.integers(1, 40)), min_size=1,
                     max_size=8),
       dtype=st.sampled_from(["float32", "float64"]))
def test_column_offset_tables_of_consecutive_runs(runs, dtype):
    # Columns in runs of consecutive elements of B's rows (a convolution's output rows in
    # its padded input): strips of one or two runs are packed by masked vector loads,
    # with runs that start at B's first column or end at its last; others element-wise.
    width = 700
    cols = [min(start + j, width - 1) for start, length in runs for j in range(length)]
    blk = default_blocking(dtype)
    rng = np.random.default_rng(len(cols))
    m, n, k = 9, len(cols), 5
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, width)).astype(dtype)
    spec = GemmSpec(dtype, 1, m, n, k, (0, k, 1), (0, width, 0), (0, n, 1),
                    n_offsets=tuple(cols))
    c = np.empty((1, m, n), dtype)
    pooled_gemm(spec, blk).call_raw(a, b, c, threads=1)
    check_close(c[0], a, b[:, cols], k)


@SETTINGS
@given(m=st.integers(1, 20), n=st.integers(1, 80), k=st.integers(1, 70),
       run=st.integers(1, 40), step=st.sampled_from([1, 2, 3]), table=st.booleans(),
       blocking=st.sampled_from(["host", "small", "odd"]),
       dtype=st.sampled_from(["float32", "float64"]))
def test_b_stored_by_columns(m, n, k, run, step, table, blocking, dtype):
    # B[k, j] = Bt[j, step * k] (a dense layer's weights, a convolution's window sums):
    # blocks of VL rows at consecutive elements, or every other one, are packed a vector
    # down each column and transposed; with a reduction table of runs of ``run`` rows,
    # blocks across one run break take masked loads, others are copied element by element
    # (reduction blocks of VL + 5 rows: blocks that start inside a run, a last partial one).
    host = default_blocking(dtype)
    blk = {"host": host, "small": small_blocking(dtype),
           "odd": Blocking(host.vl, host.mr, host.nr, kc=host.vl + 5, nc=2 * host.nr)}[blocking]
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    if table:
        rows = [q // run * (run * step + 3) + q % run * step for q in range(k)]
    else:
        rows = [q * step for q in range(k)]
    ld = rows[-1] + 1
    a = rng.standard_normal((m, k)).astype(dtype)
    bt = rng.standard_normal((n, ld)).astype(dtype)
    k_offsets = tuple((q, r) for q, r in enumerate(rows)) if table else None
    spec = GemmSpec(dtype, 1, m, n, k, (0, k, 1), (0, 0 if table else step, ld), (0, n, 1),
                    k_offsets=k_offsets)
    c = np.empty((1, m, n), dtype)
    for threads in (1, 2):
        pooled_gemm(spec, blk).call_raw(a, bt, c, threads=threads)
        check_close(c[0], a, bt[:, rows].T, k)


@pytest.mark.parametrize("bits", [128, 256, 512])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_vector_width_blocking_is_correct_here(dtype, bits):
    # LLVM legalises wider vectors than the host has, so the AVX-512 blocking (8 x 32
    # float32 block, <16 x float>) is checked on any machine.
    blk = default_blocking(dtype, vector_bits=bits)
    m, n, k = 2 * blk.mr + 3, 2 * blk.nr + 5, 37
    f = pooled_gemm(GemmSpec.dense(dtype, m, n, k), blk)
    rng = np.random.default_rng(bits)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    for threads in (1, 2):
        check_close(f(a, b, threads=threads), a, b, k)


@SETTINGS
@given(dtype=st.sampled_from(["float32", "float64"]),
       m=st.integers(1, 30), n=st.integers(1, 50), k=st.integers(1, 40),
       batch=st.integers(1, 2), small=st.booleans(), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**16))
def test_an_accumulating_product_adds_to_c(dtype, m, n, k, batch, small, threads, seed):
    # C += A B: the first reduction block adds to C too (with small blocks, every block)
    import dataclasses
    spec = dataclasses.replace(GemmSpec.dense(dtype, m, n, k, batch=batch), accumulate=True)
    f = pooled_gemm(spec, small_blocking(dtype) if small else None)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, m, k)).astype(dtype)
    b = rng.standard_normal((batch, k, n)).astype(dtype)
    c0 = rng.standard_normal((batch, m, n)).astype(dtype)
    c = c0.copy()
    f.call_raw(a, b, c, threads)
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c0.astype(np.float64)
    bound = 4 * (k + 3) * EPS[dtype] * (np.matmul(np.abs(a64), np.abs(b64)) + np.abs(c64))
    assert np.all(np.abs(c - (c64 + np.matmul(a64, b64))) <= bound + 1e-300)
