"""Compiled forward + gradient against the reference evaluator, measured in one run.

For the digits MLP training step (64-128-10, batch 64, relu, bias, softmax cross-entropy,
all four gradients), softmax cross-entropy on 256x1000 logits, and the 6-layer CNN of
benchmarks/zero_elimination.py (all three weight gradients), float32: the time to build
(lower + LLVM; the differentiation and zero elimination before it are shown separately),
the time of a second build of an equal program from new tensors (the cache), the compiled
forward + gradient time (median and min over repeats), ``tg.evaluate``'s time on the same
program and the speed-up. Prints a markdown table, then the build time of one conv
layer's forward and gradients and the overhead of a call.

    python benchmarks/compiled.py
"""
import statistics
import time
import timeit

import numpy as np

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.runtime import clear_cache
from zero_elimination import cnn_program  # the CNN both benchmarks measure


def digits_mlp():
    x = tg.placeholder((64, 64), name="x")
    labels = tg.placeholder((64,), dtype="int32", name="labels")
    w1 = tg.placeholder((128, 64), name="w1")
    b1 = tg.placeholder((128,), name="b1")
    w2 = tg.placeholder((10, 128), name="w2")
    b2 = tg.placeholder((10,), name="b2")
    h = nn.relu(nn.dense(x, w1, b1))
    loss = nn.softmax_cross_entropy(nn.dense(h, w2, b2), labels)
    return [x, labels, w1, b1, w2, b2], loss, [w1, b1, w2, b2]


def softmax_cross_entropy():
    logits = tg.placeholder((256, 1000), name="logits")
    labels = tg.placeholder((256,), dtype="int32", name="labels")
    return [logits, labels], nn.softmax_cross_entropy(logits, labels), [logits]


def cnn():
    """The program of benchmarks/zero_elimination.py: conv, relu, max_pool, conv stride 2,
    relu, flatten, dense, softmax cross-entropy."""
    return cnn_program()


CASES = {"digits MLP step": digits_mlp, "softmax cross-entropy 256x1000": softmax_cross_entropy,
         "6-layer CNN step": cnn}


def feeds(inputs, rng):
    out = []
    for t in inputs:
        if t.dtype == "int32":
            out.append(rng.integers(0, 10, size=t.shape).astype("int32"))
        else:
            out.append((rng.standard_normal(t.shape) * 0.1).astype(t.dtype))
    return out


def timed(fn, repeats=None, budget=1.0):
    """Times of calls of ``fn``: ``repeats`` of them, or as many as fit ``budget`` s."""
    times = []
    deadline = time.perf_counter() + budget
    while (len(times) < repeats) if repeats else (len(times) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def measure(label, make):
    inputs, loss, wrt = make()
    start = time.perf_counter()
    res = tg.differentiate(loss, wrt).optimized()
    differentiate_s = time.perf_counter() - start
    outputs = [loss] + list(res)
    start = time.perf_counter()
    f = tg.build(inputs, outputs)
    build_s = time.perf_counter() - start
    inputs2, loss2, wrt2 = make()
    outputs2 = [loss2] + list(tg.differentiate(loss2, wrt2).optimized())
    start = time.perf_counter()
    tg.build(inputs2, outputs2)
    rebuild_s = time.perf_counter() - start

    values = feeds(inputs, np.random.default_rng(0))
    got = f(*values)
    want = tg.evaluate(outputs, dict(zip(inputs, values)))
    error = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-30))
                for g, w in zip(got, want))
    outs = [np.empty(t.shape, t.dtype) for t in outputs]
    compiled = timed(lambda: f(*values, out=outs))
    evaluated = timed(lambda: tg.evaluate(outputs, dict(zip(inputs, values))), budget=2.0)
    return dict(case=label, differentiate=differentiate_s, build=build_s, rebuild=rebuild_s,
                median=statistics.median(compiled), min=min(compiled),
                evaluate=statistics.median(evaluated), error=error)


def call_overhead():
    """Microseconds per call of a compiled function of six arguments on tiny arrays
    (five inputs and one output; with a new output array, and with ``out=``)."""
    ps = [tg.placeholder((4,), name=f"p{k}") for k in range(5)]
    y = tg.compute((4,), lambda i: ps[0][i] + ps[1][i] + ps[2][i] + ps[3][i] + ps[4][i],
                   name="y")
    f = tg.build(ps, [y])
    arrays = [np.ones(4, np.float32) for _ in ps]
    out = [np.empty(4, np.float32)]
    n = 20000
    fresh = min(timeit.repeat(lambda: f(*arrays), number=n, repeat=5)) / n
    given = min(timeit.repeat(lambda: f(*arrays, out=out), number=n, repeat=5)) / n
    return 1e6 * fresh, 1e6 * given


def conv_layer_builds(repeats=3):
    """Seconds to build one conv layer's forward and both gradients (8x32x32x32 -> 64,
    3x3, padding 1; the loss ``sum(conv * head)`` of benchmarks/peers.py) with stride 1,
    stride 2 and dilation 2, differentiation included; each build from an empty cache,
    in a process that has compiled the shared gemm routines already."""
    out = {}
    for label, stride, dilation in (("stride 1", 1, 1), ("stride 2", 2, 1),
                                    ("dilation 2", 1, 2)):
        times = []
        for _ in range(repeats):
            clear_cache()
            start = time.perf_counter()
            x = tg.placeholder((8, 32, 32, 32), name="x")
            w = tg.placeholder((64, 32, 3, 3), name="w")
            y = nn.conv2d(x, w, stride=stride, padding=1, dilation=dilation)
            head = tg.placeholder(y.shape, name="head")
            loss = ops.sum(ops.multiply(y, head))
            tg.build([x, w, head], [loss, tg.differentiate(loss, [x, w])])
            times.append(time.perf_counter() - start)
        out[label] = times
    return out


def main():
    clear_cache()
    rows = [measure(label, make) for label, make in CASES.items()]
    print("| case | differentiate + ZE s | build s | build again ms | compiled median ms "
          "| compiled min ms | tg.evaluate ms | speed-up | max rel. error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['differentiate']:.3f} | {r['build']:.3f} | "
              f"{1e3 * r['rebuild']:.3f} | {1e3 * r['median']:.3f} | {1e3 * r['min']:.3f} | "
              f"{1e3 * r['evaluate']:.2f} | {r['evaluate'] / r['median']:.1f}x | "
              f"{r['error']:.1e} |")
    print("\nbuild of one conv layer's forward and gradients, s (median / min of 3): " +
          ", ".join(f"{label} {statistics.median(ts):.2f} / {min(ts):.2f}"
                    for label, ts in conv_layer_builds().items()))
    fresh, given = call_overhead()
    print(f"\ncall of six arguments (5 inputs, 1 output of 4 floats): {fresh:.1f} us, "
          f"{given:.1f} us with out=")


if __name__ == "__main__":
    main()
