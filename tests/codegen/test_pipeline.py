"""One compile pipeline: ``tg.build``, ``tg.export`` and ``f.export`` run the same passes.

An exported library runs the kernel ``tg.build`` runs (a matmul on the gemm kernel, an
MLP's gradients, a convolution); ``f.export`` compiles again for its own thread count
(no parallel loops of a build for more threads); ``dump=`` sees every pass; an exported
matmul called through ctypes equals ``tg.evaluate``; ``llvm_ir=True`` writes the module.
"""
import ctypes
import io
import shutil

import llvmlite.binding as llvm
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.pipeline import PASSES, PLAIN_PASSES, compile_kernel

from support.native import aligned_workspace, elf_machine_and_symbols, run_driver
from support.programs import matmul, mlp_gradient


def conv():
    x = tg.placeholder((2, 3, 16, 16), name="x")
    w = tg.placeholder((8, 3, 3, 3), name="w")
    return [x, w], [nn.conv2d(x, w, padding=1)]


PROGRAMS = {"matmul": matmul, "mlp_gradient": mlp_gradient, "conv": conv}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_export_and_a_built_function_export_run_the_kernel_build_runs(program, tmp_path):
    inputs, outputs = PROGRAMS[program]()
    exported = tg.export(inputs, outputs, tmp_path / "direct", name="p")
    from_build = tg.build(inputs, outputs, name="p", threads=2).export(tmp_path / "built")
    text = format_kernel(exported.kernels["p"])
    assert format_kernel(from_build.kernels["p"]) == text
    assert tg.build(inputs, outputs, name="p", threads=1).loops == text
    if program == "matmul":
        assert "gemm(" in text  # the product kernel, as tg.build runs it


def test_a_schedule_passes_through_export(tmp_path):
    inputs, outputs = matmul()
    plain = tg.export(inputs, outputs, tmp_path / "plain", name="p", schedule="none")
    assert format_kernel(plain.kernels["p"]) == \
        tg.build(inputs, outputs, name="p", threads=1, schedule="none").loops
    assert "gemm(" not in format_kernel(plain.kernels["p"])
    unrolled = tg.build(inputs, outputs, name="p", threads=1, schedule={"c": {"unroll": "r"}})
    assert format_kernel(unrolled.export(tmp_path / "unrolled").kernels["p"]) == unrolled.loops
    with pytest.raises(tg.TegradError, match="export: schedule must be None, 'none' or a dict"):
        tg.export(inputs, outputs, tmp_path / "bad", schedule="fast")


def test_a_built_function_exports_without_the_builds_parallel_loops(tmp_path):
    idx = tg.placeholder((4096,), dtype="int64", name="idx")
    g = tg.placeholder((4096, 64), name="g")
    rows = tg.scatter_add((50, 64), (4096, 64), lambda i, j: (idx[i], j), lambda i, j: g[i, j],
                          name="rows")  # colliding rows: partitioned by row on threads
    a = tg.placeholder((1024, 512), name="a")
    b = tg.compute((1024, 512), lambda i, j: a[i, j] * 2.0, name="b")
    f = tg.build([idx, g, a], [rows, b], threads=2, name="p")
    assert "parallel for" in f.loops and "% 2 == part" in f.loops
    result = f.export(tmp_path / "lib", threads=1)
    text = format_kernel(result.kernels["p"])
    assert "parallel" not in text and "part" not in text
    assert text == tg.build([idx, g, a], [rows, b], threads=1, name="p").loops
    assert "#define P_THREADS 1" in result.header_path.read_text()
    assert not any(name.startswith("pthread_") for name in result.undefined)


def test_dump_sees_every_pass_in_order():
    inputs, outputs = matmul(8, 8, 8)
    seen = []
    compiled = compile_kernel(inputs, outputs, threads=1, name="mm",
                              dump=lambda name, text: seen.append((name, text)))
    assert [name for name, _ in seen] == [name for name, _ in PASSES]
    assert seen[0][1].splitlines()[0] == "a = placeholder((8, 8), float32)"  # the program
    assert seen[1][1].startswith("kernel mm(") and "gemm(" in seen[1][1]
    assert seen[-1][1] == format_kernel(compiled.kernel)
    stream = io.StringIO()
    plain = compile_kernel(inputs, outputs, threads=1, schedule="none", dump=stream)
    headers = [line for line in stream.getvalue().splitlines() if line.startswith("// after")]
    assert headers == [f"// after {name}" for name, _ in PLAIN_PASSES]
    assert plain.record is None and compiled.record is not None
    with pytest.raises(tg.TegradError, match="dump must be None, a callable"):
        compile_kernel(inputs, outputs, threads=1, dump="stderr")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_exported_matmul_called_through_ctypes_equals_evaluate(seed, tmp_path):
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(1, 80, 3))
    inputs, outputs = matmul(m, k, n)
    result = tg.export(inputs, outputs, tmp_path / "mm", name="mm")
    assert result.library_path is not None, result.message
    library = ctypes.CDLL(str(result.library_path))
    arrays = [rng.standard_normal(t.shape).astype("float32") for t in inputs]
    out = np.zeros((m, n), np.float32)
    args = arrays + [out, aligned_workspace(result.entries[0].workspace_bytes)]
    assert library.mm(*[ctypes.c_void_p(a.ctypes.data) for a in args]) == 0
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))[0]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def _parsed(path):
    module = llvm.parse_assembly(path.read_text())
    module.verify()
    return module


def test_llvm_ir_writes_a_parseable_module(tmp_path):
    inputs, outputs = matmul()
    result = tg.export(inputs, outputs, tmp_path / "mm", name="mm", llvm_ir=True)
    assert result.ll_path == tmp_path / "mm.ll"
    assert not _parsed(result.ll_path).get_function("mm").is_declaration
    built = tg.build(inputs, outputs, name="mm").export(tmp_path / "f", llvm_ir=True)
    assert _parsed(built.ll_path).get_function("mm").name == "mm"
    plain = tg.export(inputs, outputs, tmp_path / "none", name="mm")
    assert plain.ll_path is None and not (tmp_path / "none.ll").exists()


def test_another_target_exports_the_automatic_schedule(tmp_path):
    """The gemm kernel and vector loops are plain LLVM (portable intrinsics, packing
    into the workspace: no library call), so an aarch64 export runs the host's kernel;
    under qemu it computes what the host library computes."""
    inputs, outputs = matmul(48, 40, 36)
    arm = tg.export(inputs, outputs, tmp_path / "arm" / "mm", name="mm",
                    target="aarch64-linux-gnu")
    host = tg.export(inputs, outputs, tmp_path / "host" / "mm", name="mm")
    assert format_kernel(arm.kernels["mm"]) == format_kernel(host.kernels["mm"])
    assert elf_machine_and_symbols(arm.object_path)[0] == 183  # EM_AARCH64
    assert arm.undefined == ()
    missing = [tool for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed")
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(t.shape).astype("float32") for t in inputs]
    status, _, got = run_driver("aarch64-linux-gnu-gcc", arm, arm.entries[0], arrays,
                                tmp_path / "arm-run", runner=("qemu-aarch64",))
    assert status == 0
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_a_custom_lower_takes_no_schedule(tmp_path):
    inputs, outputs = matmul(4, 4, 4)
    with pytest.raises(tg.TegradError, match="schedule= applies to tegrad's own"):
        tg.export(inputs, outputs, tmp_path / "lib", schedule="none", lower=lower_program)
