"""An exported C library against ``tg.build``: the same program, the same thread count.

Both run the kernel of one compile pipeline (``tegrad.codegen.pipeline``), so the
library should take the build's time: the target is within 1.1x. Programs:

- the digits MLP's training step (64-128-10, batch 64: loss, logits and the four weight
  gradients), as ``python -m tegrad demo`` compiles it;
- one conv2d layer's training step: 8x32x32x32 -> 64 channels, 3x3, padding 1, its
  output and the gradients of its input and weight for a random output gradient;
- the digits CNN's whole training step with Adam (examples/on_device/export_cnn.py,
  batch 32, one thread): the library ``train_cnn.c`` calls against the ``tg.TrainStep``
  it was exported from, called from Python as ``step(x, labels)`` (which also copies
  the updates it cannot write in place back into its arrays).

The library is called through ctypes with preallocated outputs and workspace; the
build through ``f(*arrays, out=outs)`` (its argument checks included: that is the
Python price of ``tg.build`` and part of what is compared). The two alternate, each
after its own warm-up, and the table gives median and best of the per-round ratios
(library time / Python time).

    python benchmarks/export.py [--threads 1] [--rounds 15] [--only CNN]
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

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "on_device"
sys.path.insert(0, str(EXAMPLE))
import export_cnn  # noqa: E402  (the example's model, step and export)


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
    return compare(call_library, call_build, rounds) + ("malloc" in result.undefined,)


def compare(call_library, call_python, rounds, repeats=20):
    """``(best library s, best Python s, median ratio, best ratio)`` of ``rounds``
    alternating rounds, each the best of ``repeats`` calls."""
    ratios, lib_times, python_times = [], [], []
    for _ in range(rounds):
        t_lib = time_call(call_library, repeats)
        t_python = time_call(call_python, repeats)
        lib_times.append(t_lib)
        python_times.append(t_python)
        ratios.append(t_lib / t_python)
    return min(lib_times), min(python_times), statistics.median(ratios), min(ratios)


def measure_train_step(rounds, directory):
    """The digits CNN's Adam step: its exported library against the ``tg.TrainStep``."""
    step = export_cnn.train_step()
    result = export_cnn.export_library(directory / "cnn", step=step)
    if result.library_path is None:
        raise SystemExit(f"digits CNN: no shared library ({result.message})")
    library = ctypes.CDLL(str(result.library_path))
    rng = np.random.default_rng(2)
    x = rng.random(step.inputs[0].shape, dtype=np.float32)
    labels = rng.integers(0, export_cnn.CLASSES, step.inputs[1].shape).astype(np.int32)
    current = [aligned_copy(a) for a in (x, labels, *step.params.values(),
                                         *step.state.values())]
    outs = [aligned_zeros(a.nbytes).view(a.dtype).reshape(a.shape)
            for a in (np.float32(0), *current[2:])]
    workspace = aligned_zeros(result.entries[0].workspace_bytes)
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in current + outs + [workspace]]

    def call_library():
        # reads the same parameters and state each call: the work of a step, not its values
        if library.train_step(*pointers) != 0:
            raise SystemExit("digits CNN: the library returned an error")

    def call_step():
        step(x, labels)

    call_library()  # the step from the TrainStep's current values ...
    loss = step(x, labels)  # ... which it then takes itself: the same code, the same values
    after = [*step.params.values(), *step.state.values()]
    if np.float32(loss) != outs[0] or not all(map(np.array_equal, outs[1:], after)):
        raise SystemExit("digits CNN: the library's step differs from the TrainStep's")
    return compare(call_library, call_step, rounds) + ("malloc" in result.undefined,)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--only", help="time only the programs whose name contains this")
    args = p.parse_args(argv)
    print(f"threads={args.threads}, {args.rounds} rounds of best-of-20 calls each")
    print(f"{'program':<34} {'library us':>11} {'python us':>9} {'ratio med':>9} "
          f"{'ratio min':>9}  mallocs")
    with tempfile.TemporaryDirectory() as d:
        cases = {name: lambda name=name, make=make: measure(
            name, make, args.threads, args.rounds, pathlib.Path(d))
            for name, make in PROGRAMS.items()}
        cases["digits CNN Adam step, 1 thread"] = lambda: measure_train_step(
            args.rounds, pathlib.Path(d))
        for name, run in cases.items():
            if args.only and args.only not in name:
                continue
            lib, python, med, best, mallocs = run()
            print(f"{name:<34} {lib * 1e6:>11.1f} {python * 1e6:>9.1f} {med:>9.3f} "
                  f"{best:>9.3f}  {'yes' if mallocs else 'no'}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
