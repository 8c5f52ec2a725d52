"""Export of kernels as native libraries: objects, headers, shared libraries, C callers.

The kernel is the hand-written one of ``tests/support/export_sample.py`` (checked against
numpy by ``test_export_sample.py``); here it goes through export and is called from C,
from ctypes in a fresh process, and, where an aarch64 cross compiler and qemu exist, from
an aarch64 binary under qemu.
"""
import json
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tegrad.codegen.export import (ExportError, KernelModule, export_kernels, normalize_triple,
                                   target_spec)
from tegrad.codegen.export.abi import WORKSPACE_ALIGNMENT, entry_point
from tegrad.codegen.loops.nodes import Block, Buffer, Kernel

from support import export_sample as sample
from support.native import elf_machine_and_symbols, elf_needed_libraries

N = sample.N


def export_sample(path, target=None, **options):
    kernels = {"affine": sample.sample_kernel(), "affine_copy": sample.sample_kernel("copy")}
    return export_kernels(kernels, path, make_module=sample.sample_module, target=target,
                          **options)


@pytest.fixture(scope="module")
def host_export(tmp_path_factory):
    return export_sample(tmp_path_factory.mktemp("host") / "lib")


# ---------------------------------------------------------------- targets

def test_short_triples_are_normalised():
    assert normalize_triple("aarch64-linux-gnu") == "aarch64-unknown-linux-gnu"
    assert normalize_triple("aarch64-unknown-linux-gnu") == "aarch64-unknown-linux-gnu"
    assert normalize_triple("x86_64-pc-windows-msvc") == "x86_64-pc-windows-msvc"
    assert normalize_triple("wasm32") == "wasm32-unknown-unknown"


def test_host_target_uses_the_host_cpu_and_a_foreign_one_a_baseline():
    import llvmlite.binding as llvm
    host = target_spec()
    assert host.is_host and host.cpu == llvm.get_host_cpu_name()
    arm = target_spec("aarch64-linux-gnu")
    assert not arm.is_host and (arm.cpu, arm.features) == ("generic", "+neon")
    assert target_spec("aarch64-linux-gnu", cpu="cortex-a72").cpu == "cortex-a72"


def test_unknown_target_is_an_export_error():
    with pytest.raises(ExportError, match="no backend for target 'nonsense-unknown-unknown'"):
        target_spec("nonsense")


@pytest.mark.parametrize("triple, magic, machine", [
    ("aarch64-unknown-linux-gnu", b"\x7fELF", 183),
    ("armv7-unknown-linux-gnueabihf", b"\x7fELF", 40),
    ("riscv64-unknown-linux-gnu", b"\x7fELF", 243),
    ("wasm32-unknown-unknown", b"\0asm", None),
    ("x86_64-pc-windows-msvc", b"\x64\x86", None),
])
def test_objects_for_other_targets(tmp_path, triple, magic, machine):
    result = export_sample(tmp_path / "lib", triple, linker=None)
    data = result.object_path.read_bytes()
    assert data.startswith(magic)
    if machine is not None:
        assert struct.unpack_from("<H", data, 18)[0] == machine
    assert result.header_path.exists()
    if result.library_path is None:
        assert "link" in result.message


# ---------------------------------------------------------------- the header

def test_header_declares_entry_points_shapes_and_codes(host_export):
    text = host_export.header_path.read_text()
    assert ("int affine(const float *x, const int32_t *idx, const float *w, const float *b, "
            "const int32_t *d, float *y, int32_t *q, void *workspace);") in text
    assert "const char *affine_error_string(int code);" in text
    assert f"#define AFFINE_X_DIM0 {N}" in text and "#define AFFINE_W_NDIM 0" in text
    assert '#define AFFINE_IDX_DTYPE "int32"' in text
    assert f"#define AFFINE_WORKSPACE_BYTES {-(-N * 4 // 64) * 64}" in text
    assert "#define AFFINE_ERROR_INDEX_OUT_OF_RANGE_IDX 1" in text
    assert "#define AFFINE_ERROR_DIVISION_BY_ZERO_D 2" in text
    assert "int affine_copy(" in text


@pytest.mark.parametrize("compiler, standard", [("cc", "c99"), ("cc", "c11"), ("c++", "c++11")])
def test_header_compiles_cleanly(host_export, tmp_path, compiler, standard):
    source = tmp_path / ("use.cpp" if compiler == "c++" else "use.c")
    source.write_text(f'#include "{host_export.header_path}"\n'
                      "int (*f)(const float *, const int32_t *, const float *, const float *,"
                      " const int32_t *, float *, int32_t *, void *) = affine;\n")
    done = subprocess.run([compiler, f"-std={standard}", "-Wall", "-Wextra", "-Werror",
                           "-pedantic", "-fsyntax-only", str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_dtype_has_a_c_type_of_its_size():
    from tegrad.codegen.export.abi import C_TYPES
    from tegrad.ir.dtypes import ALL_DTYPES
    assert set(C_TYPES) == set(ALL_DTYPES)
    for dtype, (_, size) in C_TYPES.items():
        assert np.dtype(dtype).itemsize == size


def test_tensor_names_become_distinct_c_parameters():
    names = ["x", "class", "d(w1)", "d_w1_", "workspace"]
    args = tuple(Buffer(n, (2,), "float32", "input") for n in names)
    entry = entry_point("f", Kernel("f", args, (), Block(())), {})
    idents = [p.ident for p in entry.params]
    assert idents == ["x", "class_", "d_w1_", "d_w1__", "workspace_", "workspace"]


def test_workspace_offsets_are_aligned():
    temps = tuple(Buffer(f"t{k}", (n,), dtype, "temp")
                  for k, (n, dtype) in enumerate([(3, "float32"), (1, "int8"), (20, "float64")]))
    a = Buffer("a", (2,), "float32", "input")
    entry = entry_point("f", Kernel("f", (a,), temps, Block(())), {})
    assert entry.temp_offsets == (0, 64, 128)
    assert entry.workspace_bytes == 128 + 20 * 8 + (-(128 + 160)) % WORKSPACE_ALIGNMENT


# ---------------------------------------------------------------- calling the host library

def test_host_object_has_only_the_entry_points_as_globals(host_export):
    machine, symbols = elf_machine_and_symbols(host_export.object_path)
    assert symbols == {"affine", "affine_error_string", "affine_copy", "affine_copy_error_string"}
    assert host_export.undefined == ()
    assert elf_machine_and_symbols(host_export.object_path, undefined=True)[1] == set()


def test_shared_library_loads_only_libc_and_libm(host_export):
    needed = elf_needed_libraries(host_export.library_path)
    assert all(lib.startswith(("libc.so", "libm.so")) for lib in needed), needed


CTYPES_SCRIPT = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    lib = ctypes.CDLL(sys.argv[1])
    lib.affine_error_string.restype = ctypes.c_char_p

    def aligned(values, dtype):
        values = np.asarray(values, dtype)
        raw = np.zeros(values.nbytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        out = raw[start:start + values.nbytes].view(dtype).reshape(values.shape)
        out[...] = values
        return out

    data = json.loads(sys.argv[2])
    n = len(data["x"])
    args = [aligned(data["x"], np.float32), aligned(data["idx"], np.int32),
            aligned(data["w"], np.float32), aligned(data["b"], np.float32),
            aligned(data["d"], np.int32), aligned(np.zeros(n), np.float32),
            aligned(np.zeros(n), np.int32), aligned(np.zeros(data["workspace"]), np.uint8)]
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in args]
    status = lib.affine(*pointers)
    report = {"status": status, "y": args[5].tolist(), "q": args[6].tolist()}
    bad = pointers[:]
    bad[0] = ctypes.c_void_p(args[0].ctypes.data + 4)
    report["misaligned"] = lib.affine(*bad)
    bad[0] = None
    report["null"] = lib.affine(*bad)
    report["messages"] = {c: lib.affine_error_string(c).decode()
                          for c in (report["misaligned"], status, 1, 2, 99)}
    print(json.dumps(report))
""")


def _ctypes_call(library, x, idx, w, b, d, workspace):
    payload = json.dumps({"x": x.tolist(), "idx": idx.tolist(), "w": float(w), "b": float(b),
                          "d": int(d), "workspace": workspace})
    done = subprocess.run([sys.executable, "-c", CTYPES_SCRIPT, str(library), payload],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_shared_library_loads_with_ctypes_in_a_fresh_process(host_export):
    x, idx, w, b, d = sample.sample_inputs()
    report = _ctypes_call(host_export.library_path, x, idx, w, b, d,
                          host_export.entries[0].workspace_bytes)
    want_y, want_q = sample.reference(x, idx, w, b, d)
    assert report["status"] == 0
    np.testing.assert_allclose(report["y"], want_y, rtol=1e-6)
    assert report["q"] == want_q.tolist()
    assert report["misaligned"] == report["null"] == -1
    assert report["messages"]["-1"] == "pointer argument 'x' is NULL or not aligned to 64 bytes"
    assert report["messages"]["99"] == "unknown error code"
    assert report["messages"]["0"] == "success"


def test_bad_input_returns_the_error_code_and_its_string(host_export):
    x, idx, w, b, d = sample.sample_inputs()
    idx[7] = -1
    report = _ctypes_call(host_export.library_path, x, idx, w, b, d,
                          host_export.entries[0].workspace_bytes)
    assert report["status"] == 1
    assert report["messages"]["1"] == "index out of range in tensor 'idx'"
    x, idx, w, b, d = sample.sample_inputs()
    report = _ctypes_call(host_export.library_path, x, idx, w, b, 0,
                          host_export.entries[0].workspace_bytes)
    assert report["status"] == 2
    assert report["messages"]["2"] == "integer division by zero in tensor 'd'"


def driver_source(header, x, idx, w, b, d):
    """A C program that calls ``affine`` on the given data, then with a bad index, a zero
    divisor and a NULL pointer, and prints every result."""
    def floats(values):
        return ", ".join(f"{float(v)!r}f" for v in values)
    bad_idx = idx.copy()
    bad_idx[3] = N + 5
    return textwrap.dedent(f"""
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include "{header}"

        static void *get(size_t bytes) {{
            void *p = aligned_alloc(AFFINE_ALIGNMENT, (bytes + 63) / 64 * 64);
            if (!p) exit(3);
            return p;
        }}

        int main(void) {{
            static const float x0[] = {{{floats(x)}}};
            static const int32_t idx0[] = {{{", ".join(map(str, idx))}}};
            static const int32_t bad0[] = {{{", ".join(map(str, bad_idx))}}};
            float *x = get(AFFINE_X_BYTES), *w = get(4), *b = get(4), *y = get(AFFINE_Y_BYTES);
            int32_t *idx = get(AFFINE_IDX_BYTES), *d = get(4), *q = get(AFFINE_Q_BYTES);
            void *workspace = get(AFFINE_WORKSPACE_BYTES);
            memcpy(x, x0, sizeof x0);
            memcpy(idx, idx0, sizeof idx0);
            *w = {float(w)!r}f; *b = {float(b)!r}f; *d = {int(d)};
            int status = affine(x, idx, w, b, d, y, q, workspace);
            printf("status %d\\n", status);
            for (int i = 0; i < AFFINE_Y_SIZE; i++) printf("y %.9g\\n", y[i]);
            for (int i = 0; i < AFFINE_Q_SIZE; i++) printf("q %d\\n", (int)q[i]);
            memcpy(idx, bad0, sizeof bad0);
            status = affine(x, idx, w, b, d, y, q, workspace);
            printf("bad index %d %s\\n", status, affine_error_string(status));
            memcpy(idx, idx0, sizeof idx0);
            *d = 0;
            status = affine(x, idx, w, b, d, y, q, workspace);
            printf("zero divisor %d %s\\n", status, affine_error_string(status));
            status = affine(x, idx, w, b, d, y, q, NULL);
            printf("null workspace %d %s\\n", status, affine_error_string(status));
            return 0;
        }}
    """)


def _check_driver_output(stdout, x, idx, w, b, d):
    lines = stdout.splitlines()
    assert lines[0] == "status 0"
    y = [float(line.split()[1]) for line in lines if line.startswith("y ")]
    q = [int(line.split()[1]) for line in lines if line.startswith("q ")]
    want_y, want_q = sample.reference(x, idx, w, b, d)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    assert q == want_q.tolist()
    assert "bad index 1 index out of range in tensor 'idx'" in lines
    assert "zero divisor 2 integer division by zero in tensor 'd'" in lines
    assert "null workspace -8 workspace is NULL or not aligned to 64 bytes" in lines
    return y, q


def _compile_and_run(compiler, objects, source, exe, runner=()):
    done = subprocess.run([compiler, "-std=c11", "-Wall", "-Werror", "-O1", str(source),
                           *map(str, objects), "-lm", "-o", str(exe)]
                          + (["-static"] if runner else []), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([*runner, str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_c_driver_calls_the_host_object(host_export, tmp_path):
    x, idx, w, b, d = sample.sample_inputs()
    source = tmp_path / "driver.c"
    source.write_text(driver_source(host_export.header_path, x, idx, w, b, d))
    stdout = _compile_and_run("cc", [host_export.object_path], source, tmp_path / "driver")
    _check_driver_output(stdout, x, idx, w, b, d)


def test_c_driver_links_the_shared_library(host_export, tmp_path):
    x, idx, w, b, d = sample.sample_inputs(seed=4)
    source = tmp_path / "driver.c"
    source.write_text(driver_source(host_export.header_path, x, idx, w, b, d))
    lib = host_export.library_path
    done = subprocess.run(["cc", "-std=c11", str(source), f"-L{lib.parent}", f"-l:{lib.name}",
                           f"-Wl,-rpath,{lib.parent}", "-o", str(tmp_path / "driver")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([str(tmp_path / "driver")], capture_output=True, text=True, timeout=60)
    _check_driver_output(run.stdout, x, idx, w, b, d)


# ---------------------------------------------------------------- aarch64

def test_aarch64_object_names_aarch64_and_holds_the_entry_points(tmp_path):
    result = export_sample(tmp_path / "lib", "aarch64-linux-gnu")
    machine, symbols = elf_machine_and_symbols(result.object_path)
    assert machine == 183  # EM_AARCH64
    assert {"affine", "affine_error_string", "affine_copy", "affine_copy_error_string"} <= symbols
    assert "#define AFFINE_WORKSPACE_BYTES" in result.header_path.read_text()


def test_aarch64_driver_under_qemu_matches_the_host(host_export, tmp_path):
    missing = [tool for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian: qemu-user, "
                    f"gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)")
    result = export_sample(tmp_path / "lib", "aarch64-linux-gnu")
    x, idx, w, b, d = sample.sample_inputs(seed=7)
    arm_source = tmp_path / "arm.c"
    arm_source.write_text(driver_source(result.header_path, x, idx, w, b, d))
    arm_out = _compile_and_run("aarch64-linux-gnu-gcc", [result.object_path], arm_source,
                               tmp_path / "driver-arm", runner=("qemu-aarch64",))
    host_source = tmp_path / "host.c"
    host_source.write_text(driver_source(host_export.header_path, x, idx, w, b, d))
    host_out = _compile_and_run("cc", [host_export.object_path], host_source,
                                tmp_path / "driver-host")
    arm_y, arm_q = _check_driver_output(arm_out, x, idx, w, b, d)
    host_y, host_q = _check_driver_output(host_out, x, idx, w, b, d)
    np.testing.assert_allclose(arm_y, host_y, rtol=1e-6)
    assert arm_q == host_q


# ---------------------------------------------------------------- mistakes

def test_no_linker_for_a_target_says_how_to_link(tmp_path):
    result = export_sample(tmp_path / "lib", "riscv64-linux-gnu")
    if shutil.which("riscv64-linux-gnu-gcc"):
        assert result.library_path is not None
    else:
        assert result.library_path is None and result.object_path.exists()
        assert "no linker for riscv64-unknown-linux-gnu found" in result.message
        assert "-lm" in result.message


def test_bad_entry_names_are_rejected(tmp_path):
    kernel = sample.sample_kernel()
    for name in ("2fast", "int", "with space"):
        with pytest.raises(ExportError, match="not a C identifier"):
            export_kernels({name: kernel}, tmp_path / "lib", make_module=sample.sample_module)
    with pytest.raises(ExportError, match="clash"):
        export_kernels({"f": kernel, "f_error_string": kernel}, tmp_path / "lib",
                       make_module=sample.sample_module)
    for name in ("expf", "memcpy", "main"):
        with pytest.raises(ExportError, match="C library function"):
            export_kernels({name: kernel}, tmp_path / "lib", make_module=sample.sample_module)


def test_factory_mistakes_are_export_errors(tmp_path):
    kernel = sample.sample_kernel()
    with pytest.raises(ExportError, match="KernelModule is needed"):
        export_kernels({"f": kernel}, tmp_path / "lib", make_module=lambda k, t: "ir")
    with pytest.raises(ExportError, match="does not define its kernel function 'missing'"):
        export_kernels({"f": kernel}, tmp_path / "lib",
                       make_module=lambda k, t: KernelModule(sample.sample_module(k).module,
                                                             "missing"))
    with pytest.raises(ExportError, match="not valid LLVM IR"):
        export_kernels({"f": kernel}, tmp_path / "lib",
                       make_module=lambda k, t: KernelModule("define nonsense", "kernel"))


def test_entry_point_named_like_a_function_the_code_calls_is_rejected(tmp_path):
    kernel = sample.sample_kernel()

    def calls_helper(k, t):
        built = sample.sample_module(k)
        text = str(built.module) + "\ndeclare ptr @helper_fn(ptr, ptr, i64)\n"
        return KernelModule(text, built.function, built.checks)

    with pytest.raises(ExportError, match="helper_fn"):
        export_kernels({"helper_fn": kernel}, tmp_path / "lib", make_module=calls_helper)


def test_host_cpu_attributes_of_the_backend_do_not_reach_another_target(tmp_path):
    kernel = sample.sample_kernel()

    def pinned(k, t):
        built = sample.sample_module(k)
        text = str(built.module).replace('define i32 @"kernel"(ptr %".1")',
                                         'define i32 @"kernel"(ptr %".1") #0')
        text += '\nattributes #0 = { "target-cpu"="skylake-avx512" "target-features"="+avx512f" }\n'
        assert "#0" in text.split("attributes")[0]
        return KernelModule(text, built.function, built.checks)

    result = export_kernels({"f": kernel}, tmp_path / "lib", make_module=pinned,
                            target="aarch64-linux-gnu")
    assert elf_machine_and_symbols(result.object_path)[0] == 183
    # code for the wrong CPU's features would be soft-float here, calling __addsf3
    assert elf_machine_and_symbols(result.object_path, undefined=True)[1] == set()


def test_export_kernel_names_the_entry_after_the_kernel(tmp_path):
    from tegrad.codegen.export.program import export_kernel
    result = export_kernel(sample.sample_kernel("gather"), tmp_path / "lib",
                           make_module=sample.sample_module)
    assert [e.name for e in result.entries] == ["gather"]
    assert "int gather(" in result.header_path.read_text()


def test_export_names_the_entry_after_the_path(tmp_path):
    from tegrad.codegen.export.program import export
    seen = {}

    def lower(inputs, outputs, *, name):
        seen.update(inputs=inputs, outputs=outputs, name=name)
        return sample.sample_kernel(name)

    result = export(["x"], ["y"], tmp_path / "train-step", lower=lower,
                    make_module=sample.sample_module)
    assert seen == {"inputs": ["x"], "outputs": ["y"], "name": "train_step"}
    assert result.library_path == tmp_path / "train-step.so"
    assert "int train_step(" in result.header_path.read_text()


def test_empty_arrays_and_workspace_may_be_null(tmp_path):
    result = export_kernels({"empty": sample.sample_kernel("empty", n=0)}, tmp_path / "lib",
                            make_module=sample.sample_module)
    assert result.entries[0].workspace_bytes == 0
    script = textwrap.dedent("""
        import ctypes, sys
        import numpy as np
        lib = ctypes.CDLL(sys.argv[1])
        raw = np.ones(64, np.int32)  # w, b, d at 64-byte aligned addresses inside it
        base = raw.ctypes.data + (-raw.ctypes.data % 64)
        w, b, d = [ctypes.c_void_p(base + 64 * k) for k in range(3)]
        print(lib.empty(None, None, w, b, d, None, None, None),
              lib.empty(None, None, None, b, d, None, None, None))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(result.library_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "-3"]
