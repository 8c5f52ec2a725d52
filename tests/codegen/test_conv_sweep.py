"""A sweep of convolutions and poolings: compiled code equals the evaluator.

``nn.conv2d``, ``nn.conv2d_transpose``, ``nn.max_pool2d`` and ``nn.avg_pool2d`` (tegrad
has no 1-D convolution), each compiled with ``tg.build`` together with every gradient
for a random output gradient (``head=``), and compared with ``tg.evaluate``.
Configurations are drawn from a seeded generator: kernel extents 1-5 per axis
independently, strides 1-4, dilations 1-3 and paddings 0-2 per axis (pooling: at most
half the kernel, ``ceil_mode`` and ``count_include_pad``), groups, batch and channel
counts including 1, asymmetric inputs, float32 and float64, threads 1 and 2, and two
size classes: tiny (loops, unrolling, guards) and large (the gemm and dot kernels, the
vector loops and the parallel loops; ``test_large_cases_take_every_compiled_path``
checks from ``f.schedule`` that the sample reaches them). Several configurations are
compiled into one program (one build per batch: LLVM's fixed cost is most of a tiny
build); a failing batch names the configurations that fail on their own, each with a
reproduction. Large batches are also built with 1 and 2 threads and must give
identical results (``tg.build`` promises results independent of ``threads``); tiny
float64 gradients are also checked against central finite differences. Programs are
built with ``check_bounds=True`` when ``tg.build`` has that option, so that a read
outside a buffer fails even where it reads harmless values.

CI runs a fixed sample (``CI_TINY`` tiny and ``CI_LARGE`` large batches of fixed seeds,
plus the regression cases) in about 40 s of CPU time. A local run draws more batches::

    TEGRAD_CONV_SWEEP=300 python -m pytest -q tests/codegen/test_conv_sweep.py

(``TEGRAD_CONV_SWEEP=N``: ``N`` further batches, ``all`` for 1000, two thirds tiny and
one third large, from seeds after the CI ones; ``TEGRAD_CONV_SWEEP_SEED=S`` starts them
at seed ``S`` instead, for a sample no earlier run has seen.)
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field

import numpy as np
import pytest

import tegrad as tg
from tegrad import nn
from tegrad.ir.errors import TegradError

F32, F64 = "float32", "float64"

#: ``tg.build`` options: bounds checks where the compiler offers them
BUILD_OPTIONS = ({"check_bounds": True}
                 if "check_bounds" in inspect.signature(tg.build).parameters else {})

#: batches of the CI sample (fixed seeds)
CI_TINY, CI_LARGE = 10, 4
#: relative tolerance (of the largest magnitude of the output) per dtype
RTOL = {F32: 2e-4, F64: 1e-10}


@dataclass
class Config:
    """One operator call: its kind, dtype, input and weight shapes and attributes."""
    op: str
    dtype: str
    x: tuple
    w: tuple | None = None
    attrs: dict = field(default_factory=dict)

    def call(self, x, w):
        if self.op == "conv2d":
            return nn.conv2d(x, w, **self.attrs)
        if self.op == "conv2d_transpose":
            return nn.conv2d_transpose(x, w, **self.attrs)
        if self.op == "max_pool2d":
            return nn.max_pool2d(x, **self.attrs)
        return nn.avg_pool2d(x, **self.attrs)

    def reproduction(self, threads=1):
        """Python lines that rebuild this configuration alone and compare."""
        w_line = (f"w = tg.placeholder({self.w}, dtype={self.dtype!r}, name='w')\n"
                  if self.w else "")
        args = "x, w" if self.w else "x"
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return (f"x = tg.placeholder({self.x}, dtype={self.dtype!r}, name='x')\n{w_line}"
                f"y = nn.{self.op}({args}{', ' if attrs else ''}{attrs})\n"
                f"h = tg.placeholder(y.shape, dtype={self.dtype!r}, name='h')\n"
                f"grads = list(tg.differentiate(y, [{args}], head=h))\n"
                f"f = tg.build([{args}, h], [y, *grads], threads={threads})\n"
                f"# compare f(...) with tg.evaluate([y, *grads], feed)")


# ---------------------------------------------------------------------------------------
# drawing configurations
# ---------------------------------------------------------------------------------------

def _per_axis(rng, lo, hi):
    """A pair of independent ints in ``[lo, hi]``, or one int for both axes (the API's
    int form) a quarter of the time."""
    if rng.random() < 0.25:
        return int(rng.integers(lo, hi + 1))
    return (int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1)))


def _pair(v):
    return v if isinstance(v, tuple) else (v, v)


def _extent(rng, size, least):
    """An input extent at least ``least`` (and 1): tiny, or 10-40 for large batches."""
    if size == "tiny":
        return max(1, least + int(rng.integers(0, 5)))
    return max(1, least, int(rng.integers(10, 41)))


def _counts(rng, size):
    """Batch and channel counts: 1-2 (tiny) or 1-4 batch and 3-24 channels (large)."""
    if size == "tiny":
        return int(rng.integers(1, 3)), int(rng.integers(1, 3))
    return int(rng.integers(1, 5)), int(rng.integers(3, 25))


def _draw_conv2d(rng, size, dtype):
    kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    stride, dilation, padding = _per_axis(rng, 1, 4), _per_axis(rng, 1, 3), _per_axis(rng, 0, 2)
    n, c = _counts(rng, size)
    groups = int(rng.choice([1, 1, 2, 3]))
    per_group_in = max(1, c // groups) if size == "large" else int(rng.integers(1, 3))
    per_group_out = (int(rng.integers(1, 3)) if size == "tiny"
                     else max(1, int(rng.integers(3, 25)) // groups))
    hw = tuple(_extent(rng, size, _pair(dilation)[d] * (kernel[d] - 1) + 1
                       - 2 * _pair(padding)[d]) for d in range(2))
    attrs = {"stride": stride, "padding": padding, "dilation": dilation}
    if groups > 1:
        attrs["groups"] = groups
    return Config("conv2d", dtype, (n, groups * per_group_in) + hw,
                  (groups * per_group_out, per_group_in) + kernel, attrs)


def _draw_conv2d_transpose(rng, size, dtype):
    kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    stride, dilation, padding = _per_axis(rng, 1, 4), _per_axis(rng, 1, 3), _per_axis(rng, 0, 2)
    s, d = _pair(stride), _pair(dilation)
    extra = tuple(int(rng.integers(0, max(s[a], d[a]))) for a in range(2))
    n, c = _counts(rng, size)
    out_channels = int(rng.integers(1, 3)) if size == "tiny" else int(rng.integers(3, 25))
    hw = tuple(int(rng.integers(1, 6)) if size == "tiny" else int(rng.integers(5, 21))
               for _ in range(2))
    attrs = {"stride": stride, "padding": padding, "dilation": dilation}
    if any(extra):
        attrs["output_padding"] = extra
    return Config("conv2d_transpose", dtype, (n, c) + hw, (c, out_channels) + kernel, attrs)


def _draw_pool(rng, size, dtype, op):
    kernel = _per_axis(rng, 1, 5)
    k = _pair(kernel)
    attrs = {"kernel": kernel}
    if rng.random() < 0.8:
        attrs["stride"] = _per_axis(rng, 1, 4)
    padding = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    if any(padding):
        attrs["padding"] = padding
    dilation = _per_axis(rng, 1, 3)
    if dilation != 1:
        attrs["dilation"] = dilation
    if rng.random() < 0.5:
        attrs["ceil_mode"] = True
    if op == "avg_pool2d" and rng.random() < 0.5:
        attrs["count_include_pad"] = False
    n, c = _counts(rng, size)
    hw = tuple(_extent(rng, size, _pair(dilation)[a] * (k[a] - 1) + 1 - 2 * padding[a])
               for a in range(2))
    return Config(op, dtype, (n, c) + hw, None, attrs)


OPS = ("conv2d", "conv2d_transpose", "max_pool2d", "avg_pool2d")


def draw_config(rng, size, op):
    """A valid configuration of ``op`` (drawn again while the operator refuses one, as
    a pooling window holding only padding)."""
    while True:
        dtype = F64 if rng.random() < 0.5 else F32
        if op == "conv2d":
            cfg = _draw_conv2d(rng, size, dtype)
        elif op == "conv2d_transpose":
            cfg = _draw_conv2d_transpose(rng, size, dtype)
        else:
            cfg = _draw_pool(rng, size, dtype, op)
        try:
            cfg.call(tg.placeholder(cfg.x, dtype=dtype),
                     tg.placeholder(cfg.w, dtype=dtype) if cfg.w else None)
        except TegradError:
            continue
        return cfg


def draw_batch(seed, size):
    """The configurations of batch ``seed``: tiny, one of each operator (in turn from a
    seeded offset); large, a convolution (conv2d for even seeds, transposed for odd
    ones) and a pooling (max, average on every other pair of seeds)."""
    rng = np.random.default_rng([seed, 0 if size == "tiny" else 1])
    if size == "large":
        return [draw_config(rng, size, OPS[seed % 2]),
                draw_config(rng, size, OPS[2 + seed // 2 % 2])]
    first = int(rng.integers(len(OPS)))
    return [draw_config(rng, size, OPS[(first + i) % len(OPS)]) for i in range(len(OPS))]


# ---------------------------------------------------------------------------------------
# building and comparing
# ---------------------------------------------------------------------------------------

class Program:
    """The placeholders, outputs and feed of configurations compiled together."""

    def __init__(self, configs, seed):
        rng = np.random.default_rng(seed)
        self.configs = configs
        self.inputs, self.outputs, self.feed, self.owner = [], [], {}, []
        self.parts = []  # per configuration: (diff inputs, y, head)
        for k, cfg in enumerate(configs):
            x = tg.placeholder(cfg.x, dtype=cfg.dtype, name=f"x{k}")
            w = tg.placeholder(cfg.w, dtype=cfg.dtype, name=f"w{k}") if cfg.w else None
            y = cfg.call(x, w)
            h = tg.placeholder(y.shape, dtype=cfg.dtype, name=f"h{k}")
            wrt = [x] if w is None else [x, w]
            grads = list(tg.differentiate(y, wrt, head=h))
            for t in wrt + [h]:
                self.feed[t] = rng.standard_normal(t.shape).astype(cfg.dtype)
            self.inputs += wrt + [h]
            self.outputs += [y, *grads]
            self.owner += [k] * (1 + len(grads))
            self.parts.append((wrt, y, h))

    def build(self, threads):
        return tg.build(self.inputs, self.outputs, threads=threads, **BUILD_OPTIONS)

    def run(self, f):
        return f(*[self.feed[t] for t in self.inputs])

    def mismatches(self, got, want):
        """``(configuration index, output name, message)`` per output that differs."""
        found = []
        for k, t, g, w in zip(self.owner, self.outputs, got, want):
            dtype = self.configs[k].dtype
            scale = 1.0 + float(np.max(np.abs(w), initial=0.0))
            bad = ~np.isclose(g, w, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)
            if g.shape != w.shape or g.dtype != w.dtype or bad.any():
                where = np.argwhere(bad)[:3].tolist() if g.shape == w.shape else "shape"
                err = float(np.max(np.abs(g - w))) if g.shape == w.shape else None
                found.append((k, t.name, f"{t.name}: max error {err} (scale {scale:.3g}) "
                                         f"at {where}; got {g.shape} {g.dtype}, want "
                                         f"{w.shape} {w.dtype}"))
        return found


def finite_difference_problems(program, rng):
    """Tiny float64 configurations: ``<gradients, v>`` against the central difference
    of ``sum(head * y)`` along a random direction ``v`` of every differentiated input."""
    problems = []
    want = tg.evaluate(program.outputs, program.feed)
    at = 0
    for k, (wrt, y, h) in enumerate(program.parts):
        grads = want[at + 1: at + 1 + len(wrt)]
        at += 1 + len(wrt)
        cfg = program.configs[k]
        if cfg.dtype != F64 or np.prod(cfg.x) > 400:
            continue
        direction = {t: rng.standard_normal(t.shape) for t in wrt}
        analytic = sum(float(np.sum(g * direction[t])) for g, t in zip(grads, wrt))
        eps = 1e-6

        def loss(sign):
            feed = {t: program.feed[t] + sign * eps * direction[t] for t in wrt}
            return float(np.sum(tg.evaluate(y, feed) * program.feed[h]))

        numeric = (loss(1) - loss(-1)) / (2 * eps)
        if abs(analytic - numeric) > 1e-6 * (1 + abs(analytic)):
            problems.append(f"configuration {k}: gradient . v = {analytic}, finite "
                            f"difference {numeric}")
    return problems


def _describe(configs):
    return "\n".join(f"  [{k}] {cfg}" for k, cfg in enumerate(configs))


def _alone(cfg, seed, threads):
    """The mismatches of ``cfg`` built on its own (to name the culprit of a batch)."""
    program = Program([cfg], seed)
    try:
        got = program.run(program.build(threads))
    except Exception as err:  # a crash or a failed bounds check alone
        return [f"{type(err).__name__}: {err}"]
    return [m for _, _, m in program.mismatches(got, tg.evaluate(program.outputs,
                                                                 program.feed))]


def check_batch(configs, seed, thread_counts, schedules=None):
    """Build ``configs`` as one program per thread count and compare with the evaluator
    (and the thread counts with each other); fails naming the configurations at fault."""
    program = Program(configs, seed)
    want = tg.evaluate(program.outputs, program.feed)
    problems, results = [], {}
    for threads in thread_counts:
        try:
            f = program.build(threads)
            got = program.run(f)
        except Exception as err:
            problems.append(f"threads={threads}: {type(err).__name__}: {err}")
            continue
        if schedules is not None:
            schedules.append(str(f.schedule))
        results[threads] = got
        for _, _, message in program.mismatches(got, want):
            problems.append(f"threads={threads}: {message}")
    if len(results) > 1:
        first, *others = results.items()
        for threads, got in others:
            for t, a, b in zip(program.outputs, first[1], got):
                if not np.array_equal(a, b, equal_nan=True):
                    problems.append(f"{t.name}: threads={first[0]} and threads={threads} "
                                    f"differ (max {float(np.max(np.abs(a - b)))})")
    problems += finite_difference_problems(program, np.random.default_rng(seed + 1))
    if problems:
        culprits = []
        for k, cfg in enumerate(configs):
            for threads in thread_counts:
                alone = _alone(cfg, seed, threads)
                if alone:
                    culprits.append(f"[{k}] alone with threads={threads}:\n    "
                                    + "\n    ".join(alone) + "\n"
                                    + cfg.reproduction(threads))
                    break
        pytest.fail(f"batch {seed}:\n{_describe(configs)}\n" + "\n".join(problems)
                    + "\n--- configurations failing alone:\n"
                    + ("\n".join(culprits) or "none (only together)"))


# ---------------------------------------------------------------------------------------
# the regressions that started the sweep
# ---------------------------------------------------------------------------------------

REGRESSIONS = [
    # the data gradient of a strided convolution with a non-square kernel
    Config("conv2d", F64, (1, 1, 5, 6), (1, 1, 3, 2), {"stride": 2}),
    Config("conv2d", F32, (1, 1, 5, 6), (1, 1, 3, 2), {"stride": 2}),
    Config("conv2d", F64, (2, 3, 9, 7), (4, 3, 2, 3), {"stride": 2, "padding": 1}),
    Config("conv2d", F64, (1, 2, 11, 10), (2, 2, 3, 2), {"stride": (2, 3)}),
    # the forward of a strided transposed convolution with a non-square kernel
    Config("conv2d_transpose", F64, (1, 1, 5, 6), (1, 1, 3, 2), {"stride": 2}),
    Config("conv2d_transpose", F32, (2, 3, 4, 5), (3, 2, 3, 2),
           {"stride": 2, "padding": 1, "output_padding": 1}),
    Config("conv2d_transpose", F64, (1, 2, 3, 4), (2, 3, 2, 3), {"stride": (2, 3)}),
]


@pytest.mark.parametrize("index", range(len(REGRESSIONS)))
def test_strided_non_square_kernel_regression(index):
    check_batch([REGRESSIONS[index]], 1000 + index, (1,))


# ---------------------------------------------------------------------------------------
# the sweep
# ---------------------------------------------------------------------------------------

def _local_batches():
    value = os.environ.get("TEGRAD_CONV_SWEEP", "0")
    count = 1000 if value == "all" else int(value)
    start = int(os.environ.get("TEGRAD_CONV_SWEEP_SEED", str(max(CI_TINY, CI_LARGE))))
    return [(start + i, "large" if i % 3 == 2 else "tiny") for i in range(count)]


CI_BATCHES = ([(seed, "tiny") for seed in range(CI_TINY)]
              + [(seed, "large") for seed in range(CI_LARGE)])

#: the schedules of the large batches checked in this run (for the path coverage test)
LARGE_SCHEDULES = {}


def _thread_counts(seed, size):
    """Large batches run with 1 and 2 threads (compared); tiny ones with one of them."""
    return (1, 2) if size == "large" else ((1,) if seed % 2 == 0 else (2,))


@pytest.mark.parametrize("seed, size", CI_BATCHES + _local_batches(),
                         ids=lambda v: str(v))
def test_sweep_batch_equals_evaluator(seed, size):
    schedules = []
    try:
        check_batch(draw_batch(seed, size), seed, _thread_counts(seed, size), schedules)
    finally:
        if size == "large":
            LARGE_SCHEDULES[seed] = "\n".join(schedules)


def test_large_cases_take_every_compiled_path():
    """The large CI batches reach the product kernels, vector loops and parallel loops
    (built here when the sweep's tests did not run in this session)."""
    for seed in range(CI_LARGE):
        if seed not in LARGE_SCHEDULES:
            schedules = []
            check_batch(draw_batch(seed, "large"), seed, (2,), schedules)
            LARGE_SCHEDULES[seed] = "\n".join(schedules)
    text = "\n".join(LARGE_SCHEDULES[seed] for seed in range(CI_LARGE))
    assert "gemm kernel" in text, text
    assert "dot kernel" in text or "MatrixProduct" in text, text
    assert "vectorized" in text, text
    assert " parallel" in text, text
