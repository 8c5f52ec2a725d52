"""examples/on_device: train.c against the interface of the exported digits MLP.

The header is generated from the example's own programs (``export_mlp.training_step`` and
``evaluation``): the entry points, argument order, shapes and dtypes that export writes
for them. The entry points are a C implementation of the same MLP written here, so that
train.c is compiled, linked and run now, and its recipe (batches, SGD with momentum,
accuracy) is compared with ``export_mlp.train_in_python`` on the same data.
"""
import importlib.util
import pathlib
import re
import subprocess

import numpy as np

from tegrad.codegen.export.abi import entry_point
from tegrad.codegen.export.header import header_text
from tegrad.codegen.loops.nodes import Block, Buffer, Kernel

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "on_device"
_spec = importlib.util.spec_from_file_location("export_mlp", EXAMPLE / "export_mlp.py")
export_mlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(export_mlp)

MLP_IN_C = r"""
#include <math.h>
#include <string.h>
#include "mlp.h"

#define F TRAIN_STEP_X_DIM1
#define H TRAIN_STEP_B1_DIM0
#define C TRAIN_STEP_B2_DIM0

static void forward(const float *x, int n, const float *w1, const float *b1, const float *w2,
                    const float *b2, float *pre, float *logits) {
    for (int r = 0; r < n; r++) {
        for (int o = 0; o < H; o++) {
            float s = 0.0f;
            for (int k = 0; k < F; k++) s += x[r * F + k] * w1[o * F + k];
            pre[r * H + o] = s + b1[o];
        }
        for (int o = 0; o < C; o++) {
            float s = 0.0f;
            for (int k = 0; k < H; k++) s += fmaxf(pre[r * H + k], 0.0f) * w2[o * H + k];
            logits[r * C + o] = s + b2[o];
        }
    }
}

int train_step(const float *x, const int32_t *labels, const float *w1, const float *b1,
               const float *w2, const float *b2, float *loss, float *dw1, float *db1,
               float *dw2, float *db2, void *workspace) {
    enum { B = TRAIN_STEP_X_DIM0 };
    static float pre[B * H], logits[B * C], dlogits[B * C], dh[B * H];
    (void)workspace;
    for (int r = 0; r < B; r++)
        if (labels[r] < 0 || labels[r] >= C) return 1;
    forward(x, B, w1, b1, w2, b2, pre, logits);
    float total = 0.0f;
    for (int r = 0; r < B; r++) {
        float m = logits[r * C];
        for (int c = 1; c < C; c++) m = fmaxf(m, logits[r * C + c]);
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += expf(logits[r * C + c] - m);
        total += m + logf(s) - logits[r * C + labels[r]];
        for (int c = 0; c < C; c++)
            dlogits[r * C + c] = (expf(logits[r * C + c] - m) / s - (c == labels[r])) / B;
    }
    *loss = total / B;
    memset(dw2, 0, sizeof(float) * C * H); memset(db2, 0, sizeof(float) * C);
    memset(dw1, 0, sizeof(float) * H * F); memset(db1, 0, sizeof(float) * H);
    for (int r = 0; r < B; r++)
        for (int c = 0; c < C; c++) {
            db2[c] += dlogits[r * C + c];
            for (int k = 0; k < H; k++) dw2[c * H + k] += dlogits[r * C + c] * fmaxf(pre[r * H + k], 0.0f);
        }
    for (int r = 0; r < B; r++)
        for (int k = 0; k < H; k++) {
            float s = 0.0f;
            for (int c = 0; c < C; c++) s += dlogits[r * C + c] * w2[c * H + k];
            dh[r * H + k] = pre[r * H + k] > 0.0f ? s : 0.0f;
        }
    for (int r = 0; r < B; r++)
        for (int o = 0; o < H; o++) {
            db1[o] += dh[r * H + o];
            for (int k = 0; k < F; k++) dw1[o * F + k] += dh[r * H + o] * x[r * F + k];
        }
    return 0;
}

const char *train_step_error_string(int code) {
    return code == 1 ? "index out of range in tensor 'labels'" : "unknown error code";
}

int evaluate(const float *x, const float *w1, const float *b1, const float *w2, const float *b2,
             float *logits, void *workspace) {
    static float pre[EVALUATE_X_DIM0 * H];
    (void)workspace;
    forward(x, EVALUATE_X_DIM0, w1, b1, w2, b2, pre, logits);
    return 0;
}

const char *evaluate_error_string(int code) { return code ? "unknown error code" : "success"; }
"""


def interface_header(path, n_test):
    """The header export writes for the example's two programs (without temporaries)."""
    entries = []
    for name, (inputs, outputs) in {"train_step": export_mlp.training_step(),
                                    "evaluate": export_mlp.evaluation(n_test)}.items():
        args = tuple(Buffer(t.name, t.shape, t.dtype, "input") for t in inputs)
        args += tuple(Buffer(f"out{k}_{t.name}", t.shape, t.dtype, "output")
                      for k, t in enumerate(outputs))
        entries.append(entry_point(name, Kernel(name, args, (), Block(())),
                                   {1: ("index_out_of_range", "labels")}))
    path.write_text(header_text("mlp", entries, "the host"))


def clusters(n, seed):
    """Ten separable Gaussian clusters in 64 dimensions, values like the digits' pixels."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).uniform(0, 1, (10, 64))
    y = rng.integers(0, 10, n).astype(np.int32)
    x = np.clip(centres[y] + rng.normal(0, 0.35, (n, 64)), 0, 1).astype(np.float32)
    return x, y


def test_train_c_follows_the_python_recipe(tmp_path, capsys):
    data = clusters(256, 1) + clusters(50, 2)
    export_mlp.write_data(tmp_path / "data", data)
    interface_header(tmp_path / "mlp.h", n_test=50)
    (tmp_path / "mlp.c").write_text(MLP_IN_C)
    exe = tmp_path / "train"
    done = subprocess.run(["cc", "-std=c11", "-O2", "-ffp-contract=off", "-Wall", "-Wextra",
                           "-Werror", f"-I{tmp_path}", str(EXAMPLE / "train.c"),
                           str(tmp_path / "mlp.c"), "-lm", "-o", str(exe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([str(exe), str(tmp_path / "data"), "3"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    c_losses = [float(v) for v in re.findall(r"mean loss (\S+)", run.stdout)]
    c_accuracy = float(re.search(r"test accuracy (\S+)", run.stdout).group(1))
    assert "us per call" in run.stdout

    accuracy = export_mlp.train_in_python(3, data)
    py_losses = [float(v) for v in re.findall(r"mean loss (\S+)", capsys.readouterr().out)]
    assert len(c_losses) == len(py_losses) == 3
    np.testing.assert_allclose(c_losses, py_losses, atol=2e-3)
    assert c_losses[-1] < 0.5 * c_losses[0]
    assert abs(c_accuracy - accuracy) <= 2 / 50 and c_accuracy > 0.8


def test_train_c_reports_missing_data(tmp_path):
    interface_header(tmp_path / "mlp.h", n_test=50)
    (tmp_path / "mlp.c").write_text(MLP_IN_C)
    exe = tmp_path / "train"
    done = subprocess.run(["cc", "-std=c11", f"-I{tmp_path}", str(EXAMPLE / "train.c"),
                           str(tmp_path / "mlp.c"), "-lm", "-o", str(exe)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([str(exe), str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert run.returncode == 1 and "run export_mlp.py first" in run.stderr


def test_the_example_exports_the_training_step_and_its_gradients():
    inputs, outputs = export_mlp.training_step()
    assert [t.name for t in inputs] == ["x", "labels", "w1", "b1", "w2", "b2"]
    assert [t.shape for t in outputs] == [(), (128, 64), (128,), (10, 128), (10,)]
    eval_inputs, (logits,) = export_mlp.evaluation(7)
    assert logits.shape == (7, 10) and len(eval_inputs) == 5
