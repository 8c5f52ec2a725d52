"""Export the digits CNN's training step, Adam's update included, as a native library.

The model is a small convolutional network on scikit-learn's 8x8 digits (the data and
split of ``export_mlp.py``): conv2d 1->8 channels 3x3 with padding 1 and a bias, relu,
2x2 max pooling, flatten, dense 128->10, softmax cross-entropy. ``tg.train_step`` compiles
its loss, gradients and ``tg.optim.adam(0.01)``'s update (PyTorch's defaults otherwise) as
one program; this script writes

- ``OUT.o``, ``OUT.h`` (and ``OUT.so`` when a linker for the target is found): the entry
  point ``train_step(x, labels, conv_w, conv_b, dense_w, dense_b, <Adam's exp_avg and
  exp_avg_sq of each>, step, loss, <the next parameters and state>, workspace)``, see
  ``OUT.h``;
- ``DATA/``: the training images and labels, the initial weights and the images of each
  step's batch (``order.i32``, steps x batch), as raw little-endian files, which
  ``train_cnn.c`` reads.

``--python`` instead runs the same steps with the Python ``TrainStep`` (the same compiled
code, called from numpy) and prints what ``train_cnn.c`` prints: the loss of each step,
then the mean time per step. Without ``--target`` the library is compiled for this
machine's CPU, as ``tg.train_step`` is, so the two print the same losses. See README.md.

    python examples/on_device/export_cnn.py [--target aarch64-linux-gnu] [-o build/cnn]
                                            [--data build/cnn_data] [--steps 50] [--python]
"""
import time

import numpy as np

import export_mlp
import tegrad as tg
from tegrad import nn

SIDE, CHANNELS, CLASSES = 8, 8, 10
#: pooled features: CHANNELS x (SIDE / 2) x (SIDE / 2)
FEATURES = CHANNELS * (SIDE // 2) ** 2
BATCH, STEPS, LEARNING_RATE = 32, 50, 0.01
SEED = export_mlp.SEED
PARAMS = ("conv_w", "conv_b", "dense_w", "dense_b")


def placeholders(batch=BATCH):
    """``(x, labels, params)``: a batch of images ``(batch, 1, 8, 8)``, its labels and the
    four parameters."""
    x = tg.placeholder((batch, 1, SIDE, SIDE), name="x")
    labels = tg.placeholder((batch,), dtype="int32", name="labels")
    shapes = [(CHANNELS, 1, 3, 3), (CHANNELS,), (CLASSES, FEATURES), (CLASSES,)]
    return x, labels, [tg.placeholder(s, name=n) for n, s in zip(PARAMS, shapes)]


def logits_of(x, params):
    conv_w, conv_b, dense_w, dense_b = params
    h = nn.relu(nn.bias_add(nn.conv2d(x, conv_w, padding=1), conv_b))
    return nn.dense(tg.ops.flatten(nn.max_pool2d(h, 2)), dense_w, dense_b)


def initial_weights(seed=SEED):
    """He-normal weights and zero biases, float32, in the order of :data:`PARAMS`."""
    rng = np.random.default_rng(seed)
    conv_w = rng.standard_normal((CHANNELS, 1, 3, 3)) * np.sqrt(2.0 / 9)
    dense_w = rng.standard_normal((CLASSES, FEATURES)) * np.sqrt(2.0 / FEATURES)
    return [conv_w.astype(np.float32), np.zeros(CHANNELS, np.float32),
            dense_w.astype(np.float32), np.zeros(CLASSES, np.float32)]


def train_step(batch=BATCH, lr=LEARNING_RATE):
    """The compiled ``tg.TrainStep`` (Adam, one thread), its parameters initialised by
    :func:`initial_weights`."""
    x, labels, params = placeholders(batch)
    loss = nn.softmax_cross_entropy(logits_of(x, params), labels)
    return tg.train_step(loss, params, optimizer=tg.optim.adam(lr), inputs=[x, labels],
                         threads=1, init=dict(zip(PARAMS, initial_weights())))


def step_order(n_train, steps=STEPS, batch=BATCH):
    """``(steps, batch)`` int32: the training images of each step's batch, epoch after
    epoch of ``export_mlp.batch_order``'s seeded permutations (each step's batch within one
    epoch, the images past the epoch's last full batch unused)."""
    per_epoch = n_train // batch
    order = export_mlp.batch_order(n_train, -(-steps // per_epoch))
    rows = [order[s // per_epoch, (s % per_epoch) * batch:(s % per_epoch + 1) * batch]
            for s in range(steps)]
    return np.asarray(rows, np.int32).reshape(steps, batch)


def write_data(directory, steps=STEPS, data=None):
    """Write the training images and labels of ``data`` (default: ``export_mlp``'s), the
    initial weights and :func:`step_order` as raw files in ``directory``; return the number
    of training images."""
    train_x, train_y = (export_mlp.load_data() if data is None else data)[:2]
    files = {"train_x.f32": train_x, "train_y.i32": train_y,
             "order.i32": step_order(len(train_x), steps)}
    files.update((f"{name}.f32", w) for name, w in zip(PARAMS, initial_weights()))
    export_mlp.write_raw(directory, files)
    return len(train_x)


def export_library(path, *, target=None, cpu=None, step=None):
    """Export ``step`` (default: a new :func:`train_step`) as entry point ``train_step``
    at ``path`` (for this machine's CPU when ``target`` and ``cpu`` are None, the code the
    Python step runs)."""
    step = train_step() if step is None else step
    return step.export(path, target=target, cpu=cpu, threads=1, name="train_step")


def train_in_python(steps=STEPS, data=None):
    """Run ``steps`` steps of the Python ``TrainStep`` on the batches ``train_cnn.c`` reads;
    print each step's loss and the mean milliseconds per step as ``train_cnn.c`` does;
    return the losses."""
    train_x, train_y = (export_mlp.load_data() if data is None else data)[:2]
    step = train_step()
    images = train_x.reshape(-1, 1, SIDE, SIDE)
    losses, elapsed = [], 0.0
    for s, rows in enumerate(step_order(len(train_x), steps)):
        batch = np.ascontiguousarray(images[rows]), np.ascontiguousarray(train_y[rows])
        start = time.perf_counter()
        losses.append(step(*batch))
        elapsed += time.perf_counter() - start
        print(f"{s + 1} {losses[-1]:.9g}")
    print(f"time {1e3 * elapsed / max(steps, 1):.4f} ms per step")
    return losses


def main(argv=None):
    parser = export_mlp.export_arguments(__doc__, "build/cnn", "build/cnn_data")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--python", action="store_true",
                        help="run the steps with the Python TrainStep instead of exporting")
    args = parser.parse_args(argv)
    if args.python:
        return train_in_python(args.steps)
    n_train = write_data(args.data, args.steps)
    print(f"wrote {n_train} training images and {args.steps} batches to {args.data}/")
    result = export_library(args.output, target=args.target, cpu=args.cpu)
    export_mlp.print_export(result)
    return result


if __name__ == "__main__":
    main()
