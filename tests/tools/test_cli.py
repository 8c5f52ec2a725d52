"""``python -m tegrad demo`` and ``python -m tegrad explain`` run as a user runs them."""
import configparser
import pathlib
import re
import subprocess
import sys
import time

import numpy as np

import tegrad as tg
from tegrad.tools import explain_op

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tegrad", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def test_demo_trains_the_mlp_and_saves_its_weights(tmp_path):
    path = tmp_path / "weights.npz"
    proc = _run("demo", "--epochs", "2", "--save", str(path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    accuracy = re.search(r"^test accuracy: ([\d.]+)% \((\d+)/(\d+)\)$", out, re.M)
    assert accuracy, out
    assert float(accuracy.group(1)) >= 90.0
    assert int(accuracy.group(3)) == 359
    assert re.search(r"^backend: native \(LLVM\);", out, re.M)
    assert re.search(r"^time per epoch: [\d.]+ s; compile time: [\d.]+ s", out, re.M)
    assert "epoch 2/2" in proc.stderr  # the progress bars
    weights = np.load(path)
    assert {k: weights[k].shape for k in weights.files} == {
        "w1": (128, 64), "b1": (128,), "w2": (10, 128), "b2": (10,)}


def _costs(text, which):
    return [int(n) for n in re.findall(rf"{which} zero elimination \(iterations=(\d+),", text)]


def test_explain_strided_conv_shows_both_gradients_getting_cheaper():
    proc = _run("explain", "conv2d", "--stride", "2")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("conv2d(x: float32 (1, 2, 8, 8), w: float32 (4, 2, 3, 3), stride=2)")
    assert "dconv2d/dx:" in out and "dconv2d/dw:" in out
    before, after = _costs(out, "before"), _costs(out, "after")
    assert len(before) == len(after) == 2
    assert all(a * 50 < b for a, b in zip(after, before)), (before, after)
    assert "loop nest" in out


def _one_line_error(proc):
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_explain_unknown_operator_lists_the_operators():
    line = _one_line_error(_run("explain", "conv3d"))
    assert "unknown operator 'conv3d'" in line
    assert "conv2d" in line and "max_pool2d" in line and "softmax_cross_entropy" in line


def test_explain_unknown_attribute_lists_the_attributes():
    line = _one_line_error(_run("explain", "conv2d", "--strides", "2"))
    assert "'strides'" in line
    assert "stride, padding, dilation, groups" in line


def test_explain_bad_attribute_value_is_a_one_line_error():
    line = _one_line_error(_run("explain", "conv2d", "--stride", "0"))
    assert "stride" in line


def test_console_script_points_at_the_cli():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    scripts = cfg["options.entry_points"]["console_scripts"].split("\n")
    assert "tegrad = tegrad.tools.cli:main" in [s.strip() for s in scripts]


def test_demo_rejects_settings_it_cannot_train_with():
    assert "larger than the 1438 training images" in _one_line_error(
        _run("demo", "--batch", "5000"))
    assert "--epochs must be at least 1" in _one_line_error(_run("demo", "--epochs", "0"))


def test_version():
    proc = _run("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"tegrad {tg.__version__}"


def test_every_command_has_help():
    for command in ("demo", "explain", "export"):
        proc = _run(command, "--help")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: tegrad {command}"), proc.stdout


def test_explain_op_help_lists_the_attributes():
    proc = _run("explain", "conv2d", "--help")
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^  --(\w+) \((.*)\)$", proc.stdout, re.M)
    assert [name for name, _ in listed] == explain_op.attributes("conv2d")
    assert ("stride", "1 here") in listed
    assert "x: float32 (1, 2, 8, 8)" in proc.stdout
    assert "unknown operator 'conv3d'" in _one_line_error(_run("explain", "conv3d", "--help"))


def test_options_are_checked_before_any_work(tmp_path):
    for args in (("demo", "--threads", "0"), ("export", "model.py", "--threads", "0"),
                 ("demo", "--lr", "-1"), ("demo", "--seed", "-3"),
                 ("demo", "--save", str(tmp_path / "missing" / "w.npz"))):
        start = time.perf_counter()
        line = _one_line_error(_run(*args))
        assert args[-2] in line or "--save" in line, line
        # no training, no compiling: the time of starting Python and importing tegrad
        assert time.perf_counter() - start < 30
    assert "folder" in _one_line_error(_run("demo", "--save", str(tmp_path / "no" / "w")))


def test_explain_states_the_loss_it_differentiates():
    proc = _run("explain", "flatten")
    assert proc.returncode == 0, proc.stderr
    assert "the loss sum(head * flatten)" in proc.stdout
    after = proc.stdout.split("after zero elimination", 1)[1].splitlines()[1]
    assert re.fullmatch(r"\s*dx\[i0, i1, i2\] = head\[i0, i1 \* 2 \+ i2\]", after), after
    scalar = _run("explain", "mse_loss")
    assert "the scalar mse_loss" in scalar.stdout and "head" not in scalar.stdout
