"""Train a classifier on the handwritten digits that ship inside scikit-learn, with one
compiled training step (loss, logits and every gradient) and one compiled evaluation.

The models are tegrad expressions (:mod:`tegrad.nn`); ``tg.differentiate`` gives the
gradients of the loss, :func:`tegrad.tools.compile.compile_program` compiles them, and
SGD with momentum updates the weights in numpy between steps. A compiled function has
fixed shapes, so each epoch drops its last partial batch (the data are reshuffled every
epoch) and evaluation pads its last batch.

>>> model = mlp(hidden=16)
>>> [(name, t.shape) for name, t in model.weights.items()]
[('w1', (16, 64)), ('b1', (16,)), ('w2', (10, 16)), ('b2', (10,))]
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

import tegrad as tg
from tegrad import nn, ops
from tegrad.tools.compile import backend, compile_program

CLASSES = 10
PIXELS = 64
#: images per call of the compiled evaluation function
EVAL_BATCH = 120


class DemoError(ValueError):
    """Settings the demo cannot train with."""


@dataclasses.dataclass
class Digits:
    """The digits as float32 pixels in [0, 1] (rows of 64) and int32 labels."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits_split(*, test_fraction=0.2, seed=0):
    """scikit-learn's 1,797 8x8 digits, shuffled with ``seed`` and split train/test."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit('the digits demo needs scikit-learn: pip install -e ".[examples]"') from None
    data = load_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int32")
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Digits(x[train], y[train], x[test], y[test])


@dataclasses.dataclass
class Model:
    """Weights (placeholders, by name) and ``forward(images) -> logits``, where images is
    a ``(batch, 64)`` placeholder; ``describe`` names the architecture."""
    name: str
    describe: str
    weights: dict
    forward: object


def mlp(hidden=128):
    """dense(64 -> hidden), relu, dense(hidden -> 10)."""
    w = {"w1": tg.placeholder((hidden, PIXELS), name="w1"),
         "b1": tg.placeholder((hidden,), name="b1"),
         "w2": tg.placeholder((CLASSES, hidden), name="w2"),
         "b2": tg.placeholder((CLASSES,), name="b2")}

    def forward(images):
        h = nn.relu(nn.dense(images, w["w1"], w["b1"]))
        return nn.dense(h, w["w2"], w["b2"])

    return Model("mlp", f"MLP {PIXELS}-{hidden}-{CLASSES}", w, forward)


def cnn(hidden=16):
    """On 1x8x8 images: conv 3x3 (hidden/2 channels), relu, 2x2 max-pool, conv 3x3
    (hidden channels), relu, flatten, dense to 10; the convolutions pad by 1."""
    c1, c2 = max(hidden // 2, 1), hidden
    w = {"k1": tg.placeholder((c1, 1, 3, 3), name="k1"),
         "c1": tg.placeholder((c1,), name="c1"),
         "k2": tg.placeholder((c2, c1, 3, 3), name="k2"),
         "c2": tg.placeholder((c2,), name="c2"),
         "w3": tg.placeholder((CLASSES, c2 * 16), name="w3"),
         "b3": tg.placeholder((CLASSES,), name="b3")}

    def forward(images):
        x = ops.reshape(images, (images.shape[0], 1, 8, 8))
        h = nn.relu(nn.bias_add(nn.conv2d(x, w["k1"], padding=1), w["c1"]))
        h = nn.max_pool2d(h, 2)
        h = nn.relu(nn.bias_add(nn.conv2d(h, w["k2"], padding=1), w["c2"]))
        return nn.dense(ops.flatten(h), w["w3"], w["b3"])

    return Model("cnn", f"CNN conv3x3({c1})-relu-maxpool-conv3x3({c2})-relu-dense({CLASSES})",
                 w, forward)


MODELS = {"mlp": mlp, "cnn": cnn}


def init_weights(model, seed=0):
    """He-normal weights (fan-in = product of all but the first dimension), zero biases."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, t in model.weights.items():
        if t.ndim == 1:
            values[name] = np.zeros(t.shape, dtype="float32")
        else:
            fan_in = int(np.prod(t.shape[1:]))
            values[name] = (rng.standard_normal(t.shape) * np.sqrt(2.0 / fan_in)).astype("float32")
    return values


@dataclasses.dataclass
class Compiled:
    """The compiled training step ``step(images, labels, *weights) -> [loss, logits,
    *gradients]`` and evaluation ``evaluate(images, *weights) -> [logits]``."""
    step: object
    evaluate: object
    batch: int
    seconds: float
    backend: str


def compile_model(model, batch, *, threads=None):
    """Differentiate the model's loss on a batch and compile the step and the evaluation."""
    start = time.perf_counter()
    weights = list(model.weights.values())
    images = tg.placeholder((batch, PIXELS), name="images")
    labels = tg.placeholder((batch,), dtype="int32", name="labels")
    logits = model.forward(images)
    loss = nn.softmax_cross_entropy(logits, labels)
    grads = tg.differentiate(loss, weights)
    step = compile_program([images, labels, *weights], [loss, logits, *grads], threads=threads)
    eval_images = tg.placeholder((EVAL_BATCH, PIXELS), name="images")
    evaluate = compile_program([eval_images, *weights], [model.forward(eval_images)],
                               threads=threads)
    return Compiled(step, evaluate, batch, time.perf_counter() - start, backend())


def predict(compiled, weights, images):
    """Predicted classes of ``images`` (any number; the last call is padded)."""
    values = list(weights.values())
    preds = []
    for s in range(0, len(images), EVAL_BATCH):
        chunk = images[s:s + EVAL_BATCH]
        padded = np.zeros((EVAL_BATCH, PIXELS), dtype="float32")
        padded[:len(chunk)] = chunk
        (logits,) = compiled.evaluate(padded, *values)
        preds.append(logits[:len(chunk)].argmax(axis=1))
    return np.concatenate(preds)


@dataclasses.dataclass
class History:
    """Per epoch: mean training loss, training accuracy (of the batches as they were
    trained), test accuracy and seconds; then the final weights."""
    loss: list = dataclasses.field(default_factory=list)
    train_accuracy: list = dataclasses.field(default_factory=list)
    test_accuracy: list = dataclasses.field(default_factory=list)
    epoch_seconds: list = dataclasses.field(default_factory=list)
    weights: dict = None


def train(model, data, compiled, *, epochs, lr, momentum=0.9, seed=0, progress=False):
    """SGD with momentum (``v = momentum * v - rate * g; w += v``) for ``epochs`` epochs,
    the rate decaying from ``lr`` to 0 along a half cosine over the whole run.

    ``progress`` shows a tqdm bar per epoch with the running loss and accuracy.
    """
    weights = init_weights(model, seed)
    names = list(weights)
    velocity = {k: np.zeros_like(v) for k, v in weights.items()}
    rng = np.random.default_rng(seed)
    batch = compiled.batch
    steps = len(data.y_train) // batch
    history = History()
    for epoch in range(epochs):
        start = time.perf_counter()
        order = rng.permutation(len(data.y_train))
        total_loss, correct = 0.0, 0
        bar = _progress(steps, f"epoch {epoch + 1}/{epochs}") if progress else None
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            labels = data.y_train[idx]
            loss, logits, *grads = compiled.step(data.x_train[idx], labels,
                                                 *(weights[k] for k in names))
            rate = lr * 0.5 * (1.0 + math.cos(math.pi * (epoch * steps + s) / (epochs * steps)))
            for k, g in zip(names, grads):
                velocity[k] *= momentum
                velocity[k] -= rate * g
                weights[k] += velocity[k]
            total_loss += float(loss)
            correct += int((logits.argmax(axis=1) == labels).sum())
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"loss {total_loss / (s + 1):.3f}, "
                                    f"acc {correct / ((s + 1) * batch):.1%}", refresh=False)
        test = float((predict(compiled, weights, data.x_test) == data.y_test).mean())
        history.loss.append(total_loss / steps)
        history.train_accuracy.append(correct / (steps * batch))
        history.test_accuracy.append(test)
        history.epoch_seconds.append(time.perf_counter() - start)
        if bar is not None:
            bar.set_postfix_str(f"loss {history.loss[-1]:.3f}, acc "
                                f"{history.train_accuracy[-1]:.1%}, test {test:.1%}")
            bar.close()
    history.weights = weights
    return history


def _progress(total, description):
    from tqdm import tqdm
    return tqdm(total=total, desc=description, unit="step", leave=True)


#: defaults per model that meet the demo's bars (see ``python -m tegrad demo --help``)
DEFAULTS = {
    "mlp": {"epochs": 8, "hidden": 128, "lr": 0.1, "batch": 32},
    "cnn": {"epochs": 12, "hidden": 16, "lr": 0.1, "batch": 32},
}


def run(*, model="mlp", epochs=None, hidden=None, lr=None, batch=None, seed=0, threads=None,
        save=None, progress=True, out=print):
    """The ``demo`` command: train, report, optionally save the weights; returns the
    history."""
    settings = dict(DEFAULTS[model])
    for key, value in (("epochs", epochs), ("hidden", hidden), ("lr", lr), ("batch", batch)):
        if value is not None:
            settings[key] = value
    wall = time.perf_counter()
    data = load_digits_split()
    if settings["batch"] > len(data.y_train):
        raise DemoError(f"batch {settings['batch']} is larger than the "
                        f"{len(data.y_train)} training images")
    net = MODELS[model](settings["hidden"])
    out(f"tegrad demo: {net.describe} on scikit-learn's digits ({len(data.y_train)} "
        f"training, {len(data.y_test)} test images), batch {settings['batch']}, "
        f"lr {settings['lr']} (cosine decay), momentum 0.9, {settings['epochs']} epochs")
    compiled = compile_model(net, settings["batch"], threads=threads)
    out(f"backend: {compiled.backend}; compiled the training step and the evaluation "
        f"in {compiled.seconds:.2f} s")
    history = train(net, data, compiled, epochs=settings["epochs"], lr=settings["lr"],
                    seed=seed, progress=progress)
    final = history.test_accuracy[-1]
    n_test = len(data.y_test)
    out(f"test accuracy: {final:.2%} ({round(final * n_test)}/{n_test})")
    out(f"time per epoch: {np.mean(history.epoch_seconds):.2f} s; compile time: "
        f"{compiled.seconds:.2f} s; wall time: {time.perf_counter() - wall:.1f} s")
    if save is not None:
        save = str(save) if str(save).endswith(".npz") else f"{save}.npz"  # as np.savez names it
        np.savez(save, **history.weights)
        out(f"saved the weights ({', '.join(history.weights)}) to {save}")
    return history
