"""Exported libraries whose parallel loops run on threads: the pool is inside the object.

A program with large stages (a gather through data-dependent indices, a row reduction
and an elementwise stage) is exported with ``threads=1`` and ``threads=3``; C programs
call the objects and the shared library (host) and the aarch64 object under qemu. The
outputs equal ``tg.build``'s bit for bit whatever the thread count, a bad index gives
the same error code, and the libraries need only libc, libm and libpthread.
"""
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen.kernels.fork_join import PARALLEL_FOR

from support.native import elf_machine_and_symbols, elf_needed_libraries

ROWS, COLS, TABLE = 384, 256, 40


def program():
    table = tg.placeholder((TABLE, COLS), dtype="float32", name="table")
    idx = tg.placeholder((ROWS,), dtype="int32", name="idx")
    x = tg.placeholder((ROWS, COLS), dtype="float32", name="x")
    g = tg.compute((ROWS, COLS), lambda i, j: table[idx[i], j] * 2.0 + x[i, j], name="g")
    k = tg.reduce_axis((0, COLS), name="k")
    s = tg.compute((ROWS,), lambda i: tg.sum(g[i, k] * g[i, k], axis=k), name="s")
    y = tg.compute((ROWS, COLS), lambda i, j: g[i, j] / (s[i] + 1.0), name="y")
    return [table, idx, x], [y, s]


def inputs():
    """The inputs the C driver makes: ``table[t] = (t % 23) / 8 - 1``, ``x[t] = (t % 31)
    / 16 - 1``, ``idx[i] = (7 i) % TABLE`` (the driver's formulas, in float32)."""
    table = ((np.arange(TABLE * COLS) % 23) / 8.0 - 1.0).astype("float32").reshape(TABLE, COLS)
    x = ((np.arange(ROWS * COLS) % 31) / 16.0 - 1.0).astype("float32").reshape(ROWS, COLS)
    idx = ((7 * np.arange(ROWS)) % TABLE).astype("int32")
    return table, idx, x


DRIVER = textwrap.dedent("""
    #include <stdio.h>
    #include <stdlib.h>
    #include "HEADER"

    static void *get(size_t bytes) {
        void *p = aligned_alloc(P_ALIGNMENT, (bytes + 63) / 64 * 64 + 64);
        if (!p) exit(3);
        return p;
    }

    int main(int argc, char **argv) {
        float *table = get(P_TABLE_BYTES), *x = get(P_X_BYTES);
        float *y = get(P_Y_BYTES), *s = get(P_S_BYTES);
        int32_t *idx = get(P_IDX_BYTES);
        void *workspace = get(P_WORKSPACE_BYTES);
        for (int t = 0; t < P_TABLE_SIZE; t++) table[t] = (float)(t % 23) / 8.0f - 1.0f;
        for (int t = 0; t < P_X_SIZE; t++) x[t] = (float)(t % 31) / 16.0f - 1.0f;
        for (int i = 0; i < P_IDX_SIZE; i++) idx[i] = (7 * i) % P_TABLE_DIM0;
        int status = 0;
        for (int round = 0; round < 3 && status == 0; round++)  /* the pool is reused */
            status = p(table, idx, x, y, s, workspace);
        FILE *out = fopen(argv[1], "wb");
        fwrite(y, 1, P_Y_BYTES, out);
        fwrite(s, 1, P_S_BYTES, out);
        fclose(out);
        idx[P_IDX_SIZE - 3] = P_TABLE_DIM0;  /* out of range, in the last thread's rows */
        int bad = p(table, idx, x, y, s, workspace);
        printf("status %d threads %d bad %d %s\\n", status, P_THREADS, bad, p_error_string(bad));
        return 0;
    }
""")


def export(tmp_path, threads, target=None):
    ins, outs = program()
    return tg.export(ins, outs, tmp_path / f"lib{threads}_{target or 'host'}", name="p",
                     threads=threads, target=target)


def run_driver(tmp_path, result, compiler="cc", link=None, runner=()):
    source = tmp_path / f"{result.object_path.stem}.c"
    source.write_text(DRIVER.replace("HEADER", str(result.header_path)))
    exe = tmp_path / f"{result.object_path.stem}.exe"
    link = link or [str(result.object_path)]
    command = [compiler, "-std=c11", "-Wall", "-Werror", "-O1", str(source), *link, "-lm",
               "-lpthread", "-o", str(exe)] + (["-static"] if runner else [])
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = tmp_path / f"{result.object_path.stem}.bin"
    ran = subprocess.run([*runner, str(exe), str(data)], capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr
    raw = data.read_bytes()
    y = np.frombuffer(raw[:ROWS * COLS * 4], dtype="float32").reshape(ROWS, COLS)
    s = np.frombuffer(raw[ROWS * COLS * 4:], dtype="float32")
    return y, s, ran.stdout.strip()


@pytest.fixture(scope="module")
def built():
    ins, outs = program()
    return tg.build(ins, outs, threads=1)(*inputs())


#: the exported error string for the driver's out-of-range index
BAD_INDEX = "'idx': index out of range: a value read from it indexes 'table' (in stage 'g')"

@pytest.fixture(scope="module")
def host_exports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export_threads")
    return tmp, {threads: export(tmp, threads) for threads in (1, 3)}


def test_the_exported_program_has_parallel_loops_and_one_internal_pool(host_exports):
    tmp, results = host_exports
    assert "#define P_THREADS 3" in results[3].header_path.read_text()
    assert "#define P_THREADS 1" in results[1].header_path.read_text()
    assert "pthread_create" in results[3].undefined
    assert "pthread_create" not in results[1].undefined
    _, defined = elf_machine_and_symbols(results[3].object_path)
    assert defined == {"p", "p_error_string"}
    _, needed = elf_machine_and_symbols(results[3].object_path, undefined=True)
    assert PARALLEL_FOR not in needed and "pthread_create" in needed


def test_c_drivers_get_the_same_bits_on_one_and_three_threads(host_exports, built, tmp_path):
    tmp, results = host_exports
    want_y, want_s = built
    outputs = {}
    for threads, result in results.items():
        y, s, report = run_driver(tmp_path, result)
        assert y.tobytes() == want_y.tobytes() and s.tobytes() == want_s.tobytes(), threads
        outputs[threads] = report
    assert outputs[1] == f"status 0 threads 1 bad 1 {BAD_INDEX}"
    assert outputs[3] == outputs[1].replace("threads 1", "threads 3")


def test_the_shared_library_with_threads_needs_only_libc_libm_and_pthreads(host_exports,
                                                                          built, tmp_path):
    tmp, results = host_exports
    lib = results[3].library_path
    assert lib is not None and lib.exists()
    needed = elf_needed_libraries(lib)
    assert all(n.startswith(("libc.so", "libm.so", "libpthread.so")) for n in needed), needed
    y, s, report = run_driver(tmp_path, results[3], link=[f"-L{lib.parent}", f"-l:{lib.name}",
                                                          f"-Wl,-rpath,{lib.parent}"])
    assert y.tobytes() == built[0].tobytes() and s.tobytes() == built[1].tobytes()
    assert report.startswith("status 0 threads 3 bad 1")


def test_a_built_function_exports_with_threads(tmp_path, built):
    ins, outs = program()
    f = tg.build(ins, outs, threads=1)
    result = f.export(tmp_path / "from_f", name="p", threads=2)
    assert "#define P_THREADS 2" in result.header_path.read_text()
    y, s, report = run_driver(tmp_path, result)
    assert y.tobytes() == built[0].tobytes() and report.startswith("status 0 threads 2 bad 1")


def test_threads_of_an_export_must_be_a_positive_int(tmp_path):
    ins, outs = program()
    for bad in (0, None, 2.0, True):
        with pytest.raises(tg.TegradError, match="threads must be a positive integer"):
            tg.export(ins, outs, tmp_path / "bad", threads=bad)


def test_aarch64_driver_with_threads_under_qemu(tmp_path, built):
    missing = [tool for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian: qemu-user, "
                    f"gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)")
    result = export(tmp_path, 3, "aarch64-linux-gnu")
    assert elf_machine_and_symbols(result.object_path)[0] == 183  # EM_AARCH64
    y, s, report = run_driver(tmp_path, result, compiler="aarch64-linux-gnu-gcc",
                              runner=("qemu-aarch64",))
    np.testing.assert_allclose(y, built[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(s, built[1], rtol=1e-6)
    assert report == f"status 0 threads 3 bad 1 {BAD_INDEX}"
