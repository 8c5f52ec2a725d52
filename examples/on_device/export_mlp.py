"""Export the digits MLP's training step and evaluation function as a native library.

The model is 64-128-10 (dense, relu, dense) with softmax cross-entropy, trained on
scikit-learn's bundled 8x8 digits (``load_digits``: 1,797 images, split 80/20 with a
fixed seed) with the recipe of ``python -m tegrad demo`` (its split, initial weights,
batches of 32 reshuffled every epoch, SGD with momentum 0.9, learning rate 0.05, 10 epochs).
This script writes

- ``OUT.o``, ``OUT.h`` (and ``OUT.so`` when a linker for the target is found): entry points
  ``train_step(x, labels, w1, b1, w2, b2, loss, dw1, db1, dw2, db2, workspace)`` and
  ``evaluate(x, w1, b1, w2, b2, logits, workspace)``;
- ``DATA/``: the data, the initial weights and the order in which each epoch visits the
  training images, as raw little-endian files (``*.f32`` float32, ``*.i32`` int32, C
  order), which ``train.c`` reads.

``--python`` instead trains the same model the same way (same initial weights, batches in
the same order, the same updates) with ``tg.evaluate`` and prints its test accuracy, the
figure ``train.c`` reproduces. See README.md for the commands.

    python examples/on_device/export_mlp.py [--target aarch64-linux-gnu] [-o build/mlp]
                                            [--data build/data] [--epochs 10] [--python]
"""
import argparse
import pathlib

import numpy as np

import tegrad as tg
from tegrad import nn

FEATURES, HIDDEN, CLASSES = 64, 128, 10
#: the training recipe (python -m tegrad demo's for the MLP), the same in train.c
BATCH, EPOCHS, LEARNING_RATE, MOMENTUM = 32, 10, 0.05, 0.9
SEED = 0


def load_data(seed=SEED):
    """``(train_x, train_y, test_x, test_y)``: pixels scaled to [0, 1] (float32), labels
    (int32); the first 20% of a seeded permutation are the test set."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(0.2 * len(x)))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def placeholders(batch):
    x = tg.placeholder((batch, FEATURES), name="x")
    weights = [tg.placeholder((HIDDEN, FEATURES), name="w1"), tg.placeholder((HIDDEN,), name="b1"),
               tg.placeholder((CLASSES, HIDDEN), name="w2"), tg.placeholder((CLASSES,), name="b2")]
    return x, weights


def logits_of(x, weights):
    w1, b1, w2, b2 = weights
    return nn.dense(nn.relu(nn.dense(x, w1, b1)), w2, b2)


def training_step(batch=BATCH):
    """``(inputs, outputs)`` of one step: the batch loss and its gradients."""
    x, weights = placeholders(batch)
    labels = tg.placeholder((batch,), dtype="int32", name="labels")
    loss = nn.softmax_cross_entropy(logits_of(x, weights), labels)
    grads = tg.differentiate(loss, weights)
    return [x, labels] + weights, [loss] + list(grads)


def evaluation(n):
    """``(inputs, outputs)`` of the logits of ``n`` images."""
    x, weights = placeholders(n)
    return [x] + weights, [logits_of(x, weights)]


def initial_weights(seed=SEED):
    """He-normal weights and zero biases, float32, in the order w1, b1, w2, b2."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((HIDDEN, FEATURES)) * np.sqrt(2.0 / FEATURES)).astype(np.float32)
    w2 = (rng.standard_normal((CLASSES, HIDDEN)) * np.sqrt(2.0 / HIDDEN)).astype(np.float32)
    return [w1, np.zeros(HIDDEN, np.float32), w2, np.zeros(CLASSES, np.float32)]


def batch_order(n_train, epochs=EPOCHS, seed=SEED):
    """``(epochs, n_train)`` int32: the order in which each epoch visits the training
    images (a fresh seeded permutation per epoch; batch ``s`` is columns ``s*B:(s+1)*B``)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n_train) for _ in range(epochs)]).astype(np.int32)


def write_data(directory, data=None, epochs=EPOCHS):
    """Write ``data`` (default: :func:`load_data`), the initial weights and the batch order
    of ``epochs`` epochs as raw files in ``directory``; return the numbers of training and
    test images."""
    train_x, train_y, test_x, test_y = load_data() if data is None else data
    files = {"train_x.f32": train_x, "train_y.i32": train_y, "test_x.f32": test_x,
             "test_y.i32": test_y}
    files.update(zip(["w1.f32", "b1.f32", "w2.f32", "b2.f32"], initial_weights()))
    files["order.i32"] = batch_order(len(train_x), epochs)
    write_raw(directory, files)
    return len(train_x), len(test_x)


def write_raw(directory, files):
    """Write each array of ``files`` (file name -> array) to ``directory`` as raw
    little-endian values in C order (the files ``train.c`` and ``train_cnn.c`` read)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in files.items():
        array = np.asarray(array)
        np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tofile(directory / name)


def export_library(path, n_test, *, target=None, cpu=None):
    """Export ``train_step`` and ``evaluate`` into one library at ``path``."""
    from tegrad.codegen.export.program import export_program
    return export_program({"train_step": training_step(), "evaluate": evaluation(n_test)},
                          path, target=target, cpu=cpu)


def train_in_python(epochs=EPOCHS, data=None):
    """The recipe of train.c with ``tg.evaluate`` on ``data`` (default: :func:`load_data`);
    prints what train.c prints and returns the test accuracy."""
    train_x, train_y, test_x, test_y = load_data() if data is None else data
    inputs, outputs = training_step()
    x, labels, weights = inputs[0], inputs[1], inputs[2:]
    values = initial_weights()
    velocity = [np.zeros_like(v) for v in values]
    lr, mu = np.float32(LEARNING_RATE), np.float32(MOMENTUM)
    order = batch_order(len(train_x), max(epochs, EPOCHS))
    for epoch in range(epochs):
        total = 0.0
        steps = len(train_x) // BATCH
        for s in range(steps):
            rows = order[epoch, s * BATCH:(s + 1) * BATCH]
            feed = {x: train_x[rows], labels: train_y[rows], **dict(zip(weights, values))}
            loss, *grads = tg.evaluate(outputs, feed)
            total += float(loss)
            for k, g in enumerate(grads):
                velocity[k] = mu * velocity[k] - lr * g.astype(np.float32)
                values[k] = values[k] + velocity[k]
        print(f"epoch {epoch + 1:3d}  mean loss {total / steps:.4f}")
    eval_inputs, (logits,) = evaluation(len(test_x))
    scores = tg.evaluate(logits, dict(zip(eval_inputs, [test_x] + values)))
    accuracy = float((scores.argmax(axis=1) == test_y).mean())
    print(f"test accuracy {accuracy:.4f} ({int(round(accuracy * len(test_x)))}/{len(test_x)})")
    return accuracy


def export_arguments(doc, output, data):
    """An argument parser (described by the first line of ``doc``) with the options of
    the export scripts here: ``-o`` (default ``output``), ``--data`` (default ``data``),
    ``--target`` and ``--cpu``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("-o", "--output", default=output, help="library path, no suffix")
    parser.add_argument("--data", default=data, help="folder for the raw data files")
    parser.add_argument("--target", help="target triple (default: this machine)")
    parser.add_argument("--cpu", help="CPU name (default: host CPU, or a baseline)")
    return parser


def print_export(result):
    """Say what an export wrote, for which target, and how it was linked."""
    print(f"wrote {result.object_path} and {result.header_path} for {result.target.triple}")
    print(result.message)


def main(argv=None):
    parser = export_arguments(__doc__, "build/mlp", "build/data")
    parser.add_argument("--python", action="store_true",
                        help="train in Python with tg.evaluate instead of exporting")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args(argv)
    if args.python:
        return train_in_python(args.epochs)
    n_train, n_test = write_data(args.data, epochs=args.epochs)
    print(f"wrote {n_train} training and {n_test} test images to {args.data}/")
    result = export_library(args.output, n_test, target=args.target, cpu=args.cpu)
    print_export(result)
    return result


if __name__ == "__main__":
    main()
