"""An exported C library against ``tg.build``: the same program, the same thread count.

Both run the kernel of one compile pipeline (``tegrad.codegen.pipeline``), so the
library should take the build's time: the target is within 1.1x. Programs:

- the digits MLP's training step (64-128-10, batch 64: loss, logits and the four weight
  gradients), as ``python -m tegrad demo`` compiles it;
- one conv2d layer's training step: 8x32x32x32 -> 64 channels, 3x3, padding 1, its
  output and the gradients of its input and weight for a random output gradient.

The library is called through ctypes with preallocated outputs and workspace; the
build through ``f(*arrays, out=outs)`` (its argument checks included: that is the
Python price of ``tg.build`` and part of what is compared). The two alternate, each
after its own warm-up, and the table gives median and best of the per-round ratios.

    python benchmarks/export.py [--threads 1] [--rounds 15]
"""
import argparse
import ctypes
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

import tegrad as tg
from tegrad import nn
from tegrad.tools import demo


def mlp_step(batch=64):
    model = demo.mlp()
    images = tg.placeholder((batch, demo.PIXELS), name="images")
    labels = tg.placeholder((batch,), dtype="int32", name="labels")
    weights = list(model.weights.values())
    loss = nn.softmax_cross_entropy(model.forward(images), labels)
    grads = tg.differentiate(loss, weights)
    inputs = [images, labels, *weights]
    rng = np.random.default_rng(0)
    feed = [rng.standard_normal(images.shape).astype("float32"),
            rng.integers(0, demo.CLASSES, batch).astype("int32")]
    feed += [v for v in demo.init_weights(model).values()]
    return inputs, [loss, *grads], feed


def conv_step():
    x = tg.placeholder((8, 32, 32, 32), name="x")
    w = tg.placeholder((64, 32, 3, 3), name="w")
    y = nn.conv2d(x, w, padding=1)
    head = tg.placeholder(y.shape, name="head")
    dx, dw = tg.differentiate(y, [x, w], head=head)
    rng = np.random.default_rng(1)
    feed = [rng.standard_normal(t.shape).astype("float32") for t in (x, w, head)]
    return [x, w, head], [y, dx, dw], feed


PROGRAMS = {"digits MLP step": mlp_step, "conv2d 8x32x32x32->64 step": conv_step}


def aligned_zeros(nbytes):
    """``nbytes`` zero bytes at a 64-byte aligned address (what an entry point requires)."""
    raw = np.zeros(nbytes + 64, np.uint8)
    return raw[-raw.ctypes.data % 64:][:nbytes]


def aligned_copy(a):
    out = aligned_zeros(a.nbytes).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def time_call(fn, repeats):
    """Best of ``repeats`` batches of one call each, after a warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(name, make, threads, rounds, directory):
    inputs, outputs, feed = make()
    f = tg.build(inputs, outputs, threads=threads)
    result = f.export(directory / name.split()[0].replace("-", "_"), threads=threads,
                      name="step")
    if result.library_path is None:
        raise SystemExit(f"{name}: no shared library ({result.message})")
    library = ctypes.CDLL(str(result.library_path))
    entry = result.entries[0]
    args = [aligned_copy(a) for a in feed]
    outs = [aligned_zeros(np.dtype(t.dtype).itemsize * int(np.prod(t.shape)))
            .view(t.dtype).reshape(t.shape) for t in outputs]
    workspace = aligned_zeros(entry.workspace_bytes)
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in args + outs + [workspace]]
    built = [np.empty(t.shape, t.dtype) for t in outputs]

    def call_library():
        if library.step(*pointers) != 0:
            raise SystemExit(f"{name}: the library returned an error")

    def call_build():
        f(*args, out=built)

    call_library()
    call_build()
    for a, b in zip(outs, built):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    repeats = 20
    ratios, lib_times, build_times = [], [], []
    for _ in range(rounds):
        t_lib = time_call(call_library, repeats)
        t_build = time_call(call_build, repeats)
        lib_times.append(t_lib)
        build_times.append(t_build)
        ratios.append(t_lib / t_build)
    return (min(lib_times), min(build_times), statistics.median(ratios), min(ratios),
            "malloc" in result.undefined)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    print(f"threads={args.threads}, {args.rounds} rounds of best-of-20 calls each")
    print(f"{'program':<30} {'library us':>11} {'build us':>9} {'ratio med':>9} "
          f"{'ratio min':>9}  mallocs")
    with tempfile.TemporaryDirectory() as d:
        for name, make in PROGRAMS.items():
            lib, build, med, best, mallocs = measure(name, make, args.threads, args.rounds,
                                                     pathlib.Path(d))
            print(f"{name:<30} {lib * 1e6:>11.1f} {build * 1e6:>9.1f} {med:>9.3f} "
                  f"{best:>9.3f}  {'yes' if mallocs else 'no'}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
