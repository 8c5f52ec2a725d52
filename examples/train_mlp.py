"""Train a small MLP on a synthetic three-class spiral with tegrad's gradients.

The model and its loss are tegrad tensor expressions; ``tg.differentiate`` gives the
gradients of the loss with respect to every weight (zero-eliminated: each is the loop a
person would write), and the reference evaluator computes them with numpy.

    python examples/train_mlp.py [--steps 300]
"""
import argparse
import time

import numpy as np

import tegrad as tg
from tegrad import nn


def spirals(n_per_class, classes=3, noise=0.2, seed=0):
    """Points on ``classes`` interleaved spiral arms, and their class ids."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.0, 1.0, n_per_class)
        theta = np.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + rng.normal(0, noise, n_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype("float32"), np.concatenate(ys).astype("int32")


def build_model(batch, hidden, classes):
    """Placeholders, logits and loss of a 2-hidden-layer MLP."""
    x = tg.placeholder((batch, 2), name="x")
    labels = tg.placeholder((batch,), dtype="int32", name="labels")
    params = {
        "w1": tg.placeholder((hidden, 2), name="w1"), "b1": tg.placeholder((hidden,), name="b1"),
        "w2": tg.placeholder((hidden, hidden), name="w2"), "b2": tg.placeholder((hidden,), name="b2"),
        "w3": tg.placeholder((classes, hidden), name="w3"), "b3": tg.placeholder((classes,), name="b3"),
    }
    h = nn.relu(nn.dense(x, params["w1"], params["b1"]))
    h = nn.relu(nn.dense(h, params["w2"], params["b2"]))
    logits = nn.dense(h, params["w3"], params["b3"])
    loss = nn.softmax_cross_entropy(logits, labels)
    return x, labels, params, logits, loss


def init_params(params, seed=1):
    rng = np.random.default_rng(seed)
    values = {}
    for name, t in params.items():
        if name.startswith("w"):
            fan_in = t.shape[1]
            values[t] = (rng.standard_normal(t.shape) * np.sqrt(2.0 / fan_in)).astype("float32")
        else:
            values[t] = np.zeros(t.shape, dtype="float32")
    return values


def main(steps=300, batch=96, hidden=32, lr=0.5, seed=0):
    data, targets = spirals(200, seed=seed)
    x, labels, params, logits, loss = build_model(batch, hidden, 3)
    weights = list(params.values())
    start = time.perf_counter()
    grads = tg.differentiate(loss, weights)
    print(f"differentiated and optimised {len(weights)} gradients in "
          f"{time.perf_counter() - start:.2f} s; for example:")
    print("  " + tg.format(grads[0]).splitlines()[-1])
    values = init_params(params)
    rng = np.random.default_rng(seed)
    first = last = None
    for step in range(steps + 1):
        idx = rng.choice(len(data), batch, replace=False)
        feed = {x: data[idx], labels: targets[idx], **values}
        out = tg.evaluate([loss] + list(grads), feed)
        last = float(out[0])
        first = last if first is None else first
        for w, g in zip(weights, out[1:]):
            values[w] = values[w] - np.float32(lr) * g
        if step % 50 == 0:
            print(f"step {step:4d}  loss {last:.4f}")
    accuracy = _accuracy(data, targets, batch, x, labels, logits, values)
    print(f"loss {first:.4f} -> {last:.4f}; training accuracy {accuracy:.1%}")
    return first, last, accuracy


def _accuracy(data, targets, batch, x, labels, logits, values):
    correct = 0
    n = len(data) // batch * batch
    for s in range(0, n, batch):
        feed = {x: data[s:s + batch], labels: targets[s:s + batch], **values}
        pred = tg.evaluate(logits, feed).argmax(axis=1)
        correct += int((pred == targets[s:s + batch]).sum())
    return correct / n


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    main(steps=args.steps)
