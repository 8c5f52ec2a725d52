"""The digits MLP training step exported through the LLVM backend, against ``tg.build``.

The exported library is called from a C driver (host, and aarch64 under qemu where the
cross tools exist) and from ctypes in a fresh process; both must give ``tg.build``'s
results in float32 tolerance, and a bad label must come back as an error code.
"""
import _ctypes
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tegrad as tg


from tegrad.codegen.export.program import export_program  # noqa: E402

from support.native import elf_needed_libraries, run_driver

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "on_device"
_spec = importlib.util.spec_from_file_location("export_mlp", EXAMPLE / "export_mlp.py")
export_mlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(export_mlp)

N_EVAL = 16


@pytest.fixture(scope="module")
def programs():
    return {"train_step": export_mlp.training_step(), "evaluate": export_mlp.evaluation(N_EVAL)}


@pytest.fixture(scope="module")
def host_library(programs, tmp_path_factory):
    return export_program(programs, tmp_path_factory.mktemp("mlp") / "mlp")


def feed(seed, batch=export_mlp.BATCH):
    rng = np.random.default_rng(seed)
    x = rng.random((batch, export_mlp.FEATURES), dtype=np.float32)
    labels = rng.integers(0, export_mlp.CLASSES, batch).astype(np.int32)
    return [x, labels] + export_mlp.initial_weights(seed)


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_c_driver_matches_tg_build(programs, host_library, tmp_path):
    inputs, outputs = programs["train_step"]
    arrays = feed(0)
    want = tg.build(inputs, outputs)(*arrays)
    entry = host_library.entries[0]
    status, _, got = run_driver("cc", host_library, entry, arrays, tmp_path / "train")
    assert status == 0
    assert_close(got, want)
    eval_inputs, eval_outputs = programs["evaluate"]
    x = feed(1, N_EVAL)[0]
    weights = export_mlp.initial_weights(3)
    status, _, got = run_driver("cc", host_library, host_library.entries[1], [x] + weights,
                                tmp_path / "eval")
    assert status == 0
    assert_close(got, tg.build(eval_inputs, eval_outputs)(x, *weights))


def test_bad_label_returns_an_error_code(host_library, tmp_path):
    arrays = feed(2)
    arrays[1][5] = export_mlp.CLASSES
    status, line, _ = run_driver("cc", host_library, host_library.entries[0], arrays, tmp_path)
    assert status > 0 and "index out of range" in line


CTYPES = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    library, folder, n_in, n_out, workspace = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
    lib = ctypes.CDLL(library)
    def aligned(a):
        raw = np.zeros(a.nbytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
        out[...] = a
        return out
    arrays = [aligned(np.load(f"{folder}/in{k}.npy")) for k in range(n_in)]
    arrays += [aligned(np.load(f"{folder}/like{k}.npy")) for k in range(n_out)]
    arrays.append(aligned(np.zeros(workspace, np.uint8)))
    status = lib.train_step(*[ctypes.c_void_p(a.ctypes.data) for a in arrays])
    for k in range(n_out):
        np.save(f"{folder}/out{k}.npy", arrays[n_in + k])
    print(status, "llvmlite" in sys.modules)
""")


def test_shared_library_through_ctypes_matches_tg_build(programs, host_library, tmp_path):
    inputs, outputs = programs["train_step"]
    arrays = feed(4)
    want = tg.build(inputs, outputs)(*arrays)
    for k, a in enumerate(arrays):
        np.save(tmp_path / f"in{k}.npy", a)
    for k, w in enumerate(want):
        np.save(tmp_path / f"like{k}.npy", np.zeros_like(w))
    done = subprocess.run([sys.executable, "-c", CTYPES, str(host_library.library_path),
                           str(tmp_path), str(len(arrays)), str(len(want)),
                           str(host_library.entries[0].workspace_bytes)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False"]
    assert_close([np.load(tmp_path / f"out{k}.npy") for k in range(len(want))], want)


def test_aarch64_driver_under_qemu_matches_the_host(programs, host_library, tmp_path):
    missing = [tool for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian: qemu-user, "
                    f"gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)")
    arm = export_program({"train_step": programs["train_step"]}, tmp_path / "arm" / "mlp",
                         target="aarch64-linux-gnu")
    arrays = feed(5)
    status, _, got = run_driver("aarch64-linux-gnu-gcc", arm, arm.entries[0], arrays,
                                tmp_path / "arm-run", runner=("qemu-aarch64",))
    assert status == 0
    status, _, want = run_driver("cc", host_library, host_library.entries[0], arrays,
                                 tmp_path / "host-run")
    assert status == 0
    assert_close(got, want)


def test_the_library_needs_only_libc_and_libm(host_library):
    needed = elf_needed_libraries(host_library.library_path)
    # the loss's exp and log are computed inline: libm only if something still calls it;
    # the reader of the needed libraries sees numpy's (it is not reading nothing)
    assert "libc.so.6" in elf_needed_libraries(_ctypes.__file__)
    assert all(lib.startswith(("libc.so", "libm.so")) for lib in needed), needed
