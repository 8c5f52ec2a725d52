"""examples/on_device: the digits CNN's Adam training step, exported and trained from C.

``train_cnn.c`` runs the steps of the library ``export_cnn.py`` writes; its losses are
compared, step by step, with those the Python ``TrainStep`` prints for the same batches:

- on this machine exactly (the library is compiled for the host CPU, as the
  ``TrainStep`` is: the same kernel, the same order of operations, the same printed
  digits);
- on aarch64 (cross-compiled, run under qemu) within a relative 1e-5: its 128-bit
  vectors split the reductions (the conv's and the dense layer's sums, the loss's mean)
  into other partial sums than the host's, so the float32 losses differ in their last
  bits (measured: at most 1.8e-7 relative over 50 steps) and Adam carries the difference
  on, which 1e-5 leaves room for.

The host object needs nothing but libc and libm and allocates nothing (``nm -u``).
"""
import contextlib
import importlib.util
import io
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "on_device"
if str(EXAMPLE) not in sys.path:  # export_cnn imports export_mlp, its neighbour
    sys.path.insert(0, str(EXAMPLE))
_spec = importlib.util.spec_from_file_location("export_cnn", EXAMPLE / "export_cnn.py")
export_cnn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(export_cnn)

#: fewer than the example's 50: enough for Adam's state to carry 20 updates
STEPS = 20
#: the relative difference allowed between the losses on aarch64 and on the host
ARCH_RTOL = 1e-5
ALLOCATORS = {"malloc", "calloc", "realloc", "free"}


@pytest.fixture(scope="module")
def data():
    return export_cnn.export_mlp.load_data()


@pytest.fixture(scope="module")
def python_lines(data):
    """What ``export_cnn.py --python`` prints for STEPS steps: the losses' lines."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        losses = export_cnn.train_in_python(STEPS, data)
    lines = out.getvalue().splitlines()
    assert len(lines) == STEPS + 1 and lines[-1].startswith("time ")
    # %.9g gives a float32 back exactly
    assert [np.float32(line.split()[1]) for line in lines[:-1]] == np.float32(losses).tolist()
    return lines[:-1]


@pytest.fixture(scope="module")
def folder(data, tmp_path_factory):
    """The data files of STEPS steps and the host library (``cnn.o``, ``cnn.h``)."""
    folder = tmp_path_factory.mktemp("cnn")
    export_cnn.write_data(folder / "data", STEPS, data)
    result = export_cnn.export_library(folder / "cnn")
    assert result.object_path == folder / "cnn.o"
    return folder


def build_and_run(compiler, library, folder, *flags, runner=(), steps=STEPS):
    exe = library.parent / "train_cnn"
    done = subprocess.run([compiler, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                           *flags, f"-I{library.parent}", str(EXAMPLE / "train_cnn.c"),
                           str(library), "-lm", "-o", str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return subprocess.run([*runner, str(exe), str(folder / "data"), str(steps)],
                          capture_output=True, text=True, timeout=300)


def losses_and_time(run):
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == STEPS + 1, run.stdout
    assert lines[-1].startswith("time ") and float(lines[-1].split()[1]) > 0
    return lines[:-1]


def test_the_c_losses_equal_the_python_train_steps(folder, python_lines):
    c_lines = losses_and_time(build_and_run("cc", folder / "cnn.o", folder))
    assert c_lines == python_lines
    losses = [float(line.split()[1]) for line in c_lines]
    assert [int(line.split()[0]) for line in c_lines] == list(range(1, STEPS + 1))
    assert np.mean(losses[-5:]) < 0.75 * np.mean(losses[:5])  # Adam trains the network


def test_aarch64_under_qemu_follows_the_host(folder, python_lines):
    missing = [tool for tool in ("qemu-aarch64", "aarch64-linux-gnu-gcc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian: qemu-user, "
                    f"gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)")
    arm = export_cnn.export_library(folder / "arm" / "cnn", target="aarch64-linux-gnu")
    assert arm.target.triple.startswith("aarch64")
    assert not ALLOCATORS & set(arm.undefined), arm.undefined
    run = build_and_run("aarch64-linux-gnu-gcc", arm.object_path, folder, "-static",
                        runner=("qemu-aarch64",))
    arm_lines = losses_and_time(run)
    assert [line.split()[0] for line in arm_lines] == [line.split()[0] for line in python_lines]
    np.testing.assert_allclose([float(line.split()[1]) for line in arm_lines],
                               [float(line.split()[1]) for line in python_lines],
                               rtol=ARCH_RTOL, atol=0)


def defined_by(library):
    """The names the shared ``library`` (found where ``cc`` links it from) defines."""
    path = subprocess.run(["cc", f"-print-file-name={library}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert pathlib.Path(path).is_file(), f"cc does not find {library}"
    listing = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                             text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}


def test_the_object_needs_only_libc_and_libm_and_no_allocator(folder):
    listing = subprocess.run(["nm", "-u", str(folder / "cnn.o")], capture_output=True,
                             text=True, check=True).stdout
    undefined = {line.split()[-1] for line in listing.splitlines() if line.strip()}
    assert not ALLOCATORS & undefined, undefined
    assert undefined <= defined_by("libc.so.6") | defined_by("libm.so.6"), undefined
    # the allocators would be found if they were needed: nm reads the object
    assert ALLOCATORS <= defined_by("libc.so.6")


def test_a_bad_label_is_reported_by_the_error_string(folder, tmp_path):
    shutil.copytree(folder / "data", tmp_path / "data")
    labels = np.fromfile(tmp_path / "data" / "train_y.i32", "<i4")
    order = np.fromfile(tmp_path / "data" / "order.i32", "<i4").reshape(STEPS, -1)
    labels[order[2, 5]] = export_cnn.CLASSES
    labels.tofile(tmp_path / "data" / "train_y.i32")
    shutil.copy(folder / "cnn.o", tmp_path / "cnn.o")
    shutil.copy(folder / "cnn.h", tmp_path / "cnn.h")
    run = build_and_run("cc", tmp_path / "cnn.o", tmp_path)
    assert run.returncode == 1
    assert [line.split()[0] for line in run.stdout.splitlines()] == ["1", "2"]
    assert "train_step failed at step 3" in run.stderr and "index out of range" in run.stderr


def test_the_example_steps_visit_whole_batches_of_one_epoch():
    order = export_cnn.step_order(100, steps=7, batch=32)
    assert order.shape == (7, 32) and order.dtype == np.int32
    for epoch in (order[0:3], order[3:6]):  # 100 // 32 = 3 batches an epoch
        assert len(set(epoch.ravel())) == epoch.size  # no image twice in an epoch
    assert not np.array_equal(order[0], order[3])
