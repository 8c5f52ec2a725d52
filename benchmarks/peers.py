"""tegrad against its peers: forward + gradient time of each case next to hand-written
numpy and PyTorch (and the register-blocked gemm kernel on dense 512^3), all measured
alternately in one process (so a busy machine slows every column alike). Each timed call
follows an untimed call of the same contender, made once the other runtimes' worker
threads have stopped spinning: a runtime is timed as in a loop of its own, not on a
core another runtime's idle threads still hold. Every gradient is taken for a random
output gradient (an input of the case, as in a training step), never of a plain sum,
which would let zero elimination skip the product with it; GFLOP/s count only the work
every contender must do (no multiply by padding zeros, no gradient nobody asks for).

    python benchmarks/peers.py [--threads N] [--repeats R] [--cases dense,conv2d]

Prints markdown tables: the gemm kernel planned by contraction detection (1 and 2
threads, through the native pool) against numpy and PyTorch on dense 512^3 and a 3x3
conv2d; the native pool's fork-join time; then per case the median and min ms of numpy, PyTorch and
tegrad (``tegrad.build``, when the package has it), ratios to PyTorch and GFLOP/s; then the
gradient/forward time ratios, twice: from the medians of that table, and with each
contender's forward and forward + gradient alternated with each other only. Every case's results are checked to agree across columns
(float32 tolerance) before it is timed.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads for PyTorch, numpy's BLAS and tegrad (default: all cores)")
    p.add_argument("--repeats", type=int, default=30, help="timed calls per column")
    p.add_argument("--cases", default="",
                   help="one whole case name, or comma-separated parts of case names "
                        "(default: all)")
    return p.parse_args(argv)


ARGS = _parse_args() if __name__ == "__main__" else None
if ARGS is not None:
    # numpy's BLAS reads its thread count when numpy is imported
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402

import tegrad as tg  # noqa: E402
from tegrad import nn, ops  # noqa: E402

F32 = np.float32


# -- hand-written numpy: forward and backward ---------------------------------------------


def _taps(kh, kw):
    return [(ry, rx) for ry in range(kh) for rx in range(kw)]


def _window(xp, ry, rx, oh, ow, stride, dilation):
    """The input elements tap ``(ry, rx)`` reads for every output position."""
    y0, x0 = ry * dilation, rx * dilation
    return (slice(None), slice(None), slice(y0, y0 + stride * (oh - 1) + 1, stride),
            slice(x0, x0 + stride * (ow - 1) + 1, stride))


def _out_size(size, k, stride, pad, dilation):
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _inside_taps(size, out, k, stride, pad, dilation):
    """The (output position, tap) pairs along one axis that read the input, not padding."""
    return sum(0 <= o * stride + r * dilation - pad < size for o in range(out) for r in range(k))


def np_conv2d(x, w, stride=1, padding=0, dilation=1):
    """Direct convolution, one tap at a time (a matrix product per tap)."""
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    oh, ow = _out_size(h, kh, stride, padding, dilation), _out_size(wd, kw, stride, padding,
                                                                     dilation)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = np.zeros((n, f, oh, ow), x.dtype)
    for ry, rx in _taps(kh, kw):
        win = xp[_window(xp, ry, rx, oh, ow, stride, dilation)]
        out += np.einsum("nchw,fc->nfhw", win, w[:, :, ry, rx], optimize=True)
    return out


def np_conv2d_backward(x, w, g, stride=1, padding=0, dilation=1):
    """``(dx, dw)`` of ``np_conv2d`` for the output gradient ``g``."""
    _, _, kh, kw = w.shape
    oh, ow = g.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for ry, rx in _taps(kh, kw):
        at = _window(xp, ry, rx, oh, ow, stride, dilation)
        dw[:, :, ry, rx] = np.einsum("nfhw,nchw->fc", g, xp[at], optimize=True)
        dxp[at] += np.einsum("nfhw,fc->nchw", g, w[:, :, ry, rx], optimize=True)
    h, wd = x.shape[2:]
    return dxp[:, :, padding:padding + h, padding:padding + wd], dw


def np_max_pool(x, k, stride, dilation=1):
    oh = _out_size(x.shape[2], k, stride, 0, dilation)
    ow = _out_size(x.shape[3], k, stride, 0, dilation)
    wins = [x[_window(x, ry, rx, oh, ow, stride, dilation)] for ry, rx in _taps(k, k)]
    return np.maximum.reduce(wins), wins


def np_max_pool_backward(x, k, stride, g, dilation=1):
    out, wins = np_max_pool(x, k, stride, dilation)
    oh, ow = out.shape[2:]
    dx = np.zeros_like(x)
    taken = np.zeros(out.shape, bool)
    for (ry, rx), win in zip(_taps(k, k), wins):
        first = (win == out) & ~taken   # the first maximum of the window, as PyTorch
        taken |= first
        dx[_window(x, ry, rx, oh, ow, stride, dilation)] += np.where(first, g, 0)
    return dx


def np_avg_pool(x, k, stride, padding):
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = _out_size(x.shape[2], k, stride, padding, 1)
    ow = _out_size(x.shape[3], k, stride, padding, 1)
    out = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    for ry, rx in _taps(k, k):
        out += xp[_window(xp, ry, rx, oh, ow, stride, 1)]
    return out / (k * k)


def np_avg_pool_backward(x, k, stride, padding, g):
    xp = np.zeros(x.shape[:2] + (x.shape[2] + 2 * padding, x.shape[3] + 2 * padding), x.dtype)
    oh, ow = g.shape[2:]
    for ry, rx in _taps(k, k):
        xp[_window(xp, ry, rx, oh, ow, stride, 1)] += g / (k * k)
    return xp[:, :, padding:padding + x.shape[2], padding:padding + x.shape[3]]


def np_softmax_ce(logits, labels):
    """``(loss, dlogits)`` of the mean softmax cross-entropy."""
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    s = e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = np.mean(np.log(s[:, 0]) + m[:, 0] - logits[np.arange(n), labels])
    d = e / s
    d[np.arange(n), labels] -= 1
    return np.asarray(loss, logits.dtype), (d / n).astype(logits.dtype)


# -- cases ----------------------------------------------------------------------------------


@dataclass
class Case:
    """One benchmark: a tegrad program and its numpy and PyTorch equivalents.

    ``inputs(rng)`` gives numpy arrays; ``program()`` returns ``(placeholders, outputs)``
    with outputs ``[forward, *gradients]``; ``numpy(*arrays)`` and ``torch(*tensors)``
    return the same list (a forward-only case's numpy function is called with
    ``grad=False`` and computes the forward alone). The gradients are those of the inputs
    listed in ``grad_of`` (indices), or none when ``forward_only``: of a scalar forward
    directly, else for a random output gradient ``head`` (the last input, as in a
    training step; ``sum(forward)`` would let zero elimination skip the product with it),
    which the numpy function takes as ``head=``. ``flops`` counts only the work every
    contender must do.
    """

    name: str
    inputs: Callable
    program: Callable
    numpy: Callable
    torch: Callable
    grad_of: tuple
    flops: Optional[float] = None
    forward_only: bool = False
    tolerance: float = 2e-3
    tags: tuple = field(default=())


def _tegrad_program(forward, grad_of, forward_only, with_head):
    """``program()`` for a case: placeholders made by ``forward``, gradients by tegrad
    (for a head placeholder, appended to the inputs, when ``with_head``)."""
    def program():
        placeholders, out = forward()
        if forward_only:
            return placeholders, [out]
        wrt = [placeholders[i] for i in grad_of]
        if not with_head:
            return placeholders, [out] + list(tg.differentiate(out, wrt))
        head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
        return placeholders + [head], [out] + list(tg.differentiate(out, wrt, head=head))
    return program


def _torch_program(forward, grad_of, forward_only, with_head):
    def run(*tensors):
        import torch
        if forward_only:
            with torch.no_grad():
                return [forward(*tensors)]
        if with_head:
            *tensors, head = tensors
        wrt = [tensors[i] for i in grad_of]
        for t in wrt:
            t.grad = None
        out = forward(*tensors)
        grads = torch.autograd.grad(out, wrt, head if with_head else None)
        return [out.detach()] + list(grads)
    return run


def make_case(name, shapes, tegrad_forward, numpy_fn, torch_forward, grad_of, *, flops=None,
              forward_only=False, int_inputs=None, tolerance=2e-3, tags=()):
    """A :class:`Case` from float32 input ``shapes`` (``int_inputs``: index -> (high,
    shape) for integer inputs drawn in ``[0, high)``). A case with gradients of a
    non-scalar forward takes a random output gradient ``head`` as its last input."""
    int_inputs = int_inputs or {}
    head_shape = None

    def inputs(rng):
        out = []
        for i, shape in enumerate(shapes):
            if i in int_inputs:
                high, ishape = int_inputs[i]
                out.append(rng.integers(0, high, ishape).astype(np.int64))
            else:
                out.append(rng.standard_normal(shape).astype(F32))
        if head_shape:
            out.append(rng.standard_normal(head_shape).astype(F32))
        return out

    def forward():
        placeholders = []
        for i, shape in enumerate(shapes):
            if i in int_inputs:
                placeholders.append(tg.placeholder(int_inputs[i][1], dtype="int64",
                                                   name=f"in{i}"))
            else:
                placeholders.append(tg.placeholder(shape, dtype="float32", name=f"in{i}"))
        return placeholders, tegrad_forward(*placeholders)

    if not forward_only:
        head_shape = tuple(forward()[1].shape) or None
    with_head = head_shape is not None

    def numpy_run(*arrays):
        if forward_only:
            return numpy_fn(*arrays, grad=False)
        if with_head:
            *arrays, head = arrays
            return numpy_fn(*arrays, head=head)
        return numpy_fn(*arrays)

    return Case(name, inputs, _tegrad_program(forward, grad_of, forward_only, with_head),
                numpy_run, _torch_program(torch_forward, grad_of, forward_only, with_head),
                grad_of, flops, forward_only, tolerance, tags)


def _F():
    import torch.nn.functional as F
    return F


def conv_case(name, stride, dilation, padding=1):
    """conv2d forward and both gradients for a random output gradient ``head`` (an input
    of the case, as in a training step): the loss is ``sum(conv2d(x, w) * head)``. With a
    head of ones instead, zero elimination would turn the gradients into window sums of
    one operand, which is not the work a training step does. The flops count the
    multiply-adds of taps that read the input (not the zero padding) three times: the
    forward, dx and dw."""
    n, c, h, w, f = 8, 32, 32, 32, 64
    oh = _out_size(h, 3, stride, padding, dilation)
    ow = _out_size(w, 3, stride, padding, dilation)
    flops = 3 * 2 * n * f * c * (_inside_taps(h, oh, 3, stride, padding, dilation)
                                 * _inside_taps(w, ow, 3, stride, padding, dilation))

    def numpy_fn(x, wt, head, grad=True):
        out = np_conv2d(x, wt, stride, padding, dilation)
        loss = np.float32((out * head).sum())
        if not grad:
            return [loss]
        return [loss, *np_conv2d_backward(x, wt, head, stride, padding, dilation)]

    def tegrad_fn(x, wt, head):
        y = nn.conv2d(x, wt, stride=stride, padding=padding, dilation=dilation)
        return ops.sum(ops.multiply(y, head))

    def torch_fn(x, wt, head):
        return (_F().conv2d(x, wt, stride=stride, padding=padding, dilation=dilation)
                * head).sum()

    return make_case(name, [(n, c, h, w), (f, c, 3, 3), (n, f, oh, ow)], tegrad_fn, numpy_fn,
                     torch_fn, (0, 1), flops=flops, tolerance=5e-3)


def dense_case():
    m = n = k = 512

    def numpy_fn(x, w, head):
        return [x @ w.T, head @ w, head.T @ x]

    return make_case("dense 512x512x512", [(m, k), (n, k)], nn.dense, numpy_fn,
                     lambda x, w: _F().linear(x, w), (0, 1), flops=3 * 2 * m * n * k)


def max_pool_case(name, shape, k, stride, dilation=1, forward_only=False, tags=()):
    def numpy_fn(x, head=None, grad=True):
        out, _ = np_max_pool(x, k, stride, dilation)
        if not grad:
            return [out]
        return [out, np_max_pool_backward(x, k, stride, head, dilation)]

    return make_case(name, [shape],
                     lambda x: nn.max_pool2d(x, k, stride=stride, dilation=dilation),
                     numpy_fn,
                     lambda x: _F().max_pool2d(x, k, stride=stride, dilation=dilation),
                     (0,), forward_only=forward_only, tags=tags)


def avg_pool_case():
    shape, k, s, p = (8, 64, 32, 32), 3, 1, 1

    def numpy_fn(x, head):
        return [np_avg_pool(x, k, s, p), np_avg_pool_backward(x, k, s, p, head)]

    return make_case("avg_pool 3x3 s1 p1 8x64x32x32", [shape],
                     lambda x: nn.avg_pool2d(x, k, stride=s, padding=p), numpy_fn,
                     lambda x: _F().avg_pool2d(x, k, stride=s, padding=p,
                                               count_include_pad=True), (0,))


def softmax_ce_case():
    n, k = 256, 1000

    def numpy_fn(logits, labels):
        return list(np_softmax_ce(logits, labels))

    return make_case("softmax cross-entropy 256x1000", [(n, k), None],
                     nn.softmax_cross_entropy, numpy_fn,
                     lambda logits, labels: _F().cross_entropy(logits, labels), (0,),
                     int_inputs={1: (k, (n,))})


def l2_normalize_case():
    eps = 1e-12

    def numpy_fn(x, head):
        s = np.maximum((x * x).sum(axis=1, keepdims=True), eps)
        r = 1 / np.sqrt(s)
        out = x * r
        g = head
        # d/dx (x / sqrt(s)) . g = g / sqrt(s) - x * sum(g * x) / s^(3/2)
        dx = g * r - x * (g * x).sum(axis=1, keepdims=True) * r ** 3
        return [out, dx]

    def torch_fn(x):
        import torch
        return x / torch.sqrt(torch.clamp((x * x).sum(dim=1, keepdim=True), min=eps))

    return make_case("l2_normalize 256x1024", [(256, 1024)],
                     lambda x: nn.l2_normalize(x, eps=eps, axis=1), numpy_fn, torch_fn, (0,))


def mlp_case():
    batch, d_in, hidden, classes = 64, 64, 128, 10

    def tegrad_fn(x, labels, w1, b1, w2, b2):
        h = nn.relu(nn.dense(x, w1, b1))
        return nn.softmax_cross_entropy(nn.dense(h, w2, b2), labels)

    def numpy_fn(x, labels, w1, b1, w2, b2):
        pre = x @ w1.T + b1
        h = np.maximum(pre, 0)
        loss, dlogits = np_softmax_ce(h @ w2.T + b2, labels)
        dw2, db2 = dlogits.T @ h, dlogits.sum(axis=0)
        dpre = (dlogits @ w2) * (pre > 0)
        return [loss, dpre.T @ x, dpre.sum(axis=0), dw2, db2]

    def torch_fn(x, labels, w1, b1, w2, b2):
        F = _F()
        return F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), labels)

    # the input takes no gradient: two products per weight of the first layer, three of
    # the second (the forward, dw2 and dh)
    flops = 2 * batch * (2 * d_in * hidden + 3 * hidden * classes)
    return make_case("digits MLP step 64-128-10, batch 64",
                     [(batch, d_in), None, (hidden, d_in), (hidden,), (classes, hidden),
                      (classes,)], tegrad_fn, numpy_fn, torch_fn, (2, 3, 4, 5), flops=flops,
                     int_inputs={1: (classes, (batch,))})


def conv_dense_case():
    n, c, h, w, f, classes = 32, 3, 28, 28, 10, 10
    features = f * 26 * 26

    def tegrad_fn(x, labels, wc, wd):
        return nn.softmax_cross_entropy(nn.dense(ops.flatten(nn.conv2d(x, wc)), wd), labels)

    def numpy_fn(x, labels, wc, wd):
        conv = np_conv2d(x, wc)
        flat = conv.reshape(n, features)
        loss, dlogits = np_softmax_ce(flat @ wd.T, labels)
        dwd = dlogits.T @ flat
        dconv = (dlogits @ wd).reshape(conv.shape)
        _, dwc = np_conv2d_backward(x, wc, dconv)
        return [loss, dwc, dwd]

    def torch_fn(x, labels, wc, wd):
        F = _F()
        return F.cross_entropy(F.linear(F.conv2d(x, wc).flatten(1), wd), labels)

    return make_case("conv 32x3x28x28 (10x3x3x3) -> flatten -> dense -> softmax CE",
                     [(n, c, h, w), None, (f, c, 3, 3), (classes, features)], tegrad_fn,
                     numpy_fn, torch_fn, (2, 3), int_inputs={1: (classes, (n,))})


def transpose_case(op_name, forward_only):
    n = 256
    combine = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}[op_name]
    symbol = {"add": "+", "mul": "*"}[op_name]

    def tegrad_fn(a):
        return tg.compute((n, n), lambda i, j: combine(a[i, j], a[j, i]), name="sym")

    def numpy_fn(a, head=None, grad=True):
        out = combine(a, a.T)
        if not grad:
            return [out]
        g = head
        grad = g + g.T if op_name == "add" else g * a.T + (g * a).T
        return [out, grad]

    suffix = "forward" if forward_only else "forward+gradient"
    return make_case(f"A[i,j] {symbol} A[j,i] 256^2 ({suffix})", [(n, n)], tegrad_fn, numpy_fn,
                     lambda a: combine(a, a.t()), (0,), forward_only=forward_only,
                     tags=("ratio",))


def take_case(forward_only):
    rows, width, count = 1000, 64, 4096

    def numpy_fn(x, idx, head=None, grad=True):
        out = x[idx]
        if not grad:
            return [out]
        g = head
        # sum the gradient rows of equal indices: sort, then reduce each run
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        starts = np.flatnonzero(np.r_[True, sorted_idx[1:] != sorted_idx[:-1]])
        dx = np.zeros_like(x)
        dx[sorted_idx[starts]] = np.add.reduceat(g[order], starts, axis=0)
        return [out, dx]

    suffix = "forward" if forward_only else "forward+gradient"
    return make_case(f"take 4096 rows of 1000x64 ({suffix})", [(rows, width), None],
                     lambda x, idx: ops.take(x, idx, axis=0), numpy_fn,
                     lambda x, idx: x[idx], (0,), forward_only=forward_only,
                     int_inputs={1: (rows, (count,))}, tags=("ratio",))


def all_cases():
    """Every case of the benchmark, in table order."""
    cases = [
        dense_case(),
        conv_case("conv2d 8x32x32x32 -> 64, 3x3, p1, stride 1", 1, 1),
        conv_case("conv2d 8x32x32x32 -> 64, 3x3, p1, stride 2", 2, 1),
        conv_case("conv2d 8x32x32x32 -> 64, 3x3, p1, dilation 2", 1, 2),
        max_pool_case("max_pool 2x2 8x64x32x32", (8, 64, 32, 32), 2, 2),
        avg_pool_case(),
        softmax_ce_case(),
        l2_normalize_case(),
        mlp_case(),
        conv_dense_case(),
    ]
    for forward_only in (True, False):
        cases += [
            transpose_case("add", forward_only),
            transpose_case("mul", forward_only),
            max_pool_case(f"max_pool 2x2 s2 4x16x32x32 ({'forward' if forward_only else 'forward+gradient'})",
                          (4, 16, 32, 32), 2, 2, forward_only=forward_only, tags=("ratio",)),
            max_pool_case(f"max_pool 3x3 s1 d2 4x16x32x32 ({'forward' if forward_only else 'forward+gradient'})",
                          (4, 16, 32, 32), 3, 1, dilation=2, forward_only=forward_only,
                          tags=("ratio",)),
            take_case(forward_only),
        ]
    return cases


# -- measuring --------------------------------------------------------------------------------


def _torch_inputs(arrays, grad_of, forward_only):
    import torch
    out = []
    for i, a in enumerate(arrays):
        t = torch.from_numpy(a.copy())
        if i in grad_of and not forward_only:
            t.requires_grad_(True)
        out.append(t)
    return out


def _as_numpy(values):
    out = []
    for v in values:
        if hasattr(v, "detach"):
            v = v.detach().numpy()
        out.append(np.asarray(v))
    return out


def check_agree(name, reference, results, tolerance, what):
    """Raise if ``results`` differ from ``reference`` beyond float32 rounding."""
    if len(reference) != len(results):
        raise AssertionError(f"{name}: {what} returned {len(results)} arrays, numpy "
                             f"{len(reference)}")
    for i, (r, x) in enumerate(zip(reference, results)):
        x = np.asarray(x, np.float64).reshape(np.shape(r))
        r = np.asarray(r, np.float64)
        scale = max(1.0, float(np.max(np.abs(r))) if r.size else 1.0)
        err = float(np.max(np.abs(x - r))) if r.size else 0.0
        if not err <= tolerance * scale:
            raise AssertionError(f"{name}: output {i} of {what} differs from numpy's by "
                                 f"{err:.3g} (scale {scale:.3g})")


def _others_running():
    """How many of the process's threads other than the caller are running or runnable
    (Linux; None where ``/proc`` does not tell)."""
    me = str(threading.get_native_id())
    running = 0
    try:
        for task in os.listdir("/proc/self/task"):
            if task != me:
                with open(f"/proc/self/task/{task}/stat") as f:
                    # the state follows the command name, which is in parentheses
                    running += f.read().rsplit(")", 1)[1].split()[0] == "R"
    except (OSError, IndexError):
        return None
    return running


def wait_until_quiet(poll=0.001, limit=0.5):
    """Return once no other thread of the process runs, or after ``limit`` seconds.

    After a call, a runtime's worker threads keep spinning a while before they sleep
    (measured here: PyTorch's OpenMP workers about 10 ms, OpenBLAS's about 100 ms), and
    on a machine of few cores they take a core from whatever runs next."""
    deadline = time.perf_counter() + limit
    while _others_running() and time.perf_counter() < deadline:
        time.sleep(poll)


#: seconds of untimed calls before each timed one: a thread woken after a pause may be
#: put on a core another thread has just left busy (there it shares a core with the
#: caller until the OS moves it, measured here: up to 10 ms after OpenBLAS's spin)
WARM_UP = 0.02


def alternate(contenders, repeats, cpu_times=None):
    """``{name: [seconds, ...]}``: one timed call of each contender per round, ``repeats``
    rounds. Each timed call follows :data:`WARM_UP` seconds of calls of the same
    contender, begun once the other runtimes' threads have gone quiet
    (:func:`wait_until_quiet`): as in a training loop of that runtime alone, its own
    threads are awake and where the OS puts them when busy, and nobody else's spin.
    ``cpu_times``, a dict, receives the calling thread's CPU seconds per call (what a
    single-threaded call costs however busy the machine is)."""
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            wait_until_quiet()
            until = time.perf_counter() + WARM_UP
            fn()
            while time.perf_counter() < until:
                fn()
            start, cpu_start = time.perf_counter(), time.thread_time()
            fn()
            elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
            times[name].append(elapsed)
            if cpu_times is not None:
                cpu_times.setdefault(name, []).append(cpu)
    return times


def _ms(ts):
    return f"{np.median(ts) * 1e3:.3f} / {min(ts) * 1e3:.3f}"


def _gflops(flops, ts):
    return f"{flops / np.median(ts) / 1e9:.1f}" if flops else ""


def tegrad_contender(case, arrays, threads):
    """A callable running the case compiled by ``tegrad.build``, and its compile time;
    ``(None, reason)`` when the package has no ``build``."""
    if not hasattr(tg, "build"):
        return None, "n/a (tegrad.build not available)"
    placeholders, outputs = case.program()
    start = time.perf_counter()
    f = tg.build(placeholders, outputs, threads=threads)
    compile_s = time.perf_counter() - start
    return (lambda: f(*arrays)), compile_s


@dataclass
class RatioRun:
    """A case of the gradient/forward table: each contender's median seconds in the
    alternated run, and its callable (for :func:`paired_ratio`)."""

    medians: dict
    calls: dict


def ratio_table(ratio_rows, ratio):
    """``[(case, tegrad, numpy, PyTorch), ...]``: gradient/forward time per case measured
    forward and forward + gradient, each cell ``ratio(forward, both, contender)`` (two
    :class:`RatioRun`), "n/a" for a contender missing from either."""
    out = []
    for base, by_kind in ratio_rows.items():
        if True not in by_kind or False not in by_kind:
            continue
        forward, both = by_kind[True], by_kind[False]
        out.append((base, *(ratio(forward, both, column)
                             if column in forward.calls and column in both.calls else "n/a"
                             for column in ("tegrad", "numpy", "torch"))))
    return out


def median_ratio(forward, both, column):
    """Gradient/forward time from the medians of the run of every contender alternated."""
    return f"{both.medians[column] / forward.medians[column]:.2f}"


def paired_ratio(repeats):
    """Gradient/forward time with the contender's forward and forward + gradient alternated
    with each other only (in the run of every contender, the forward and the gradient
    are timed in different runs, minutes apart on a machine whose load changes)."""
    def ratio(forward, both, column):
        times = alternate({"forward": forward.calls[column], "both": both.calls[column]},
                          repeats)
        return f"{np.median(times['both']) / np.median(times['forward']):.2f}"
    return ratio


def run_cases(cases, threads, repeats):
    import torch
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    rows = []
    ratio_rows = {}
    for case in cases:
        arrays = case.inputs(rng)
        tensors = _torch_inputs(arrays, case.grad_of, case.forward_only)
        reference = case.numpy(*arrays)
        check_agree(case.name, reference, _as_numpy(case.torch(*tensors)), case.tolerance,
                    "PyTorch")
        # (bound now: the gradient/forward table calls them after the loop)
        contenders = {"numpy": lambda case=case, arrays=arrays: case.numpy(*arrays),
                      "torch": lambda case=case, tensors=tensors: case.torch(*tensors)}
        tegrad_fn, tegrad_info = tegrad_contender(case, arrays, threads)
        if tegrad_fn is not None:
            check_agree(case.name, reference, _as_numpy(tegrad_fn()), case.tolerance, "tegrad")
            contenders["tegrad"] = tegrad_fn
        times = alternate(contenders, repeats)
        torch_med = np.median(times["torch"])
        if tegrad_fn is None:
            tegrad_cell, ratio, compile_cell, gf = tegrad_info, "", "", ""
        else:
            tegrad_cell = _ms(times["tegrad"])
            ratio = f"{np.median(times['tegrad']) / torch_med:.2f}"
            compile_cell = f"{tegrad_info:.2f}"
            gf = _gflops(case.flops, times["tegrad"])
        rows.append((case.name, tegrad_cell, _ms(times["numpy"]), _ms(times["torch"]), ratio,
                     f"{np.median(times['numpy']) / torch_med:.2f}", gf,
                     _gflops(case.flops, times["torch"]), compile_cell))
        if "ratio" in case.tags:
            base = case.name.rsplit(" (", 1)[0]
            ratio_rows.setdefault(base, {})[case.forward_only] = RatioRun(
                {k: np.median(v) for k, v in times.items()}, contenders)
        print(f"  measured {case.name}", file=sys.stderr, flush=True)
    return rows, ratio_rows


def kernel_rows(repeats, threads, program, inputs, numpy_fn, torch_fn, flops):
    """The gemm kernel planned from ``program``'s access pattern (contraction detection)
    against numpy and PyTorch at 1 and ``threads`` threads, forward only.

    ``program()`` returns ``(placeholders, output)``; ``inputs`` are arrays in the
    placeholders' order; ``numpy_fn(*inputs)`` and ``torch_fn(*tensors)`` compute the
    output. Returns table rows and the kernel's compile time.
    """
    import torch
    from tegrad.codegen.lower.product_plans import detect_contraction, gemm_plan
    from tegrad.codegen.kernels.gemm import compile_gemm
    placeholders, output = program()
    plan = gemm_plan(detect_contraction(output))
    start = time.perf_counter()
    kernel = compile_gemm(plan.spec)
    compile_s = time.perf_counter() - start
    feed = dict(zip(placeholders, inputs))
    # A padded operand is copied into the interior of a zero-bordered buffer on every
    # call (the copy is part of the kernel's time).
    operands = []
    for tensor, padding in ((plan.lhs, plan.lhs_padding), (plan.rhs, plan.rhs_padding)):
        array = feed[tensor]
        if padding:
            buffer = np.zeros([d + lo + hi for d, (lo, hi) in zip(array.shape, padding)], F32)
            interior = tuple(slice(lo, lo + d) for d, (lo, _) in zip(array.shape, padding))
            operands.append((array, buffer, interior))
        else:
            operands.append((array, array, None))
    size = np.dtype(F32).itemsize
    out = np.empty(output.shape, F32)
    addresses = (operands[0][1].ctypes.data + plan.lhs_offset * size,
                 operands[1][1].ctypes.data + plan.rhs_offset * size, out.ctypes.data)

    def run_kernel(n_threads):
        def run():
            for array, buffer, interior in operands:
                if interior is not None:
                    buffer[interior] = array
            return kernel.call_pointers(*addresses, n_threads)
        return run

    run_kernel(1)()
    check_agree("gemm kernel", [numpy_fn(*inputs)], [out], 1e-4, "the gemm kernel")
    tensors = [torch.from_numpy(a) for a in inputs]

    def run_torch(n_threads):
        def run():
            torch.set_num_threads(n_threads)
            return torch_fn(*tensors)
        return run

    torch_name = f"PyTorch ({threads} threads)"
    contenders = {"kernel, 1 thread": run_kernel(1), "kernel, 2 threads": run_kernel(2),
                  f"numpy ({threads} BLAS threads)": lambda: numpy_fn(*inputs),
                  "PyTorch (1 thread)": run_torch(1), torch_name: run_torch(threads)}
    cpu = {}
    times = alternate(contenders, repeats, cpu)
    torch.set_num_threads(threads)
    torch_med = np.median(times[torch_name])
    single = ("kernel, 1 thread", "PyTorch (1 thread)")
    rows = [(name, _ms(ts), _gflops(flops, ts), f"{np.median(ts) / torch_med:.2f}",
             f"{flops / min(cpu[name]) / 1e9:.1f}" if name in single else "")
            for name, ts in times.items()]
    return rows, compile_s


def kernel_benchmarks():
    """``(title, program, inputs, numpy_fn, torch_fn, flops)`` of the kernel tables."""
    rng = np.random.default_rng(1)

    def dense():
        x, w = tg.placeholder((512, 512), name="x"), tg.placeholder((512, 512), name="w")
        return [x, w], nn.dense(x, w)

    def conv():
        x = tg.placeholder((8, 32, 32, 32), name="x")
        w = tg.placeholder((64, 32, 3, 3), name="w")
        return [x, w], nn.conv2d(x, w, padding=1)

    return [
        ("nn.dense 512^3 float32 forward", dense,
         [rng.standard_normal((512, 512)).astype(F32) for _ in range(2)],
         lambda x, w: x @ w.T, lambda x, w: _F().linear(x, w), 2 * 512 ** 3),
        ("nn.conv2d 8x32x32x32 -> 64, 3x3, padding 1 (the input copied into a zero-padded "
         "buffer each call) float32 forward", conv,
         [rng.standard_normal((8, 32, 32, 32)).astype(F32),
          rng.standard_normal((64, 32, 3, 3)).astype(F32)],
         lambda x, w: np_conv2d(x, w, padding=1), lambda x, w: _F().conv2d(x, w, padding=1),
         2 * 8 * 64 * 32 * 32 * 32 * 9),
    ]


def fork_join_rows(reps=2000, runs=40):
    """Per fork-join time of the native pool from JIT code (the best of ``runs`` runs of
    ``reps`` fork-joins in a row): fork-joins of two
    tasks, each ``work`` dependent floating-point steps (so a worker's share takes
    measurable time), 1 thread against 2. The overhead of a fork-join is the 2-thread
    time minus half the 1-thread time."""
    import ctypes
    import llvmlite.ir as ir
    from tegrad.codegen.runtime import thread_pool as threadpool
    from tegrad.codegen.target import jit
    from tegrad.codegen.kernels.irutil import I32, I64, counted_loop, i64
    threadpool.parallel_for_address()
    m = ir.Module(name="fork_join_bench")
    f64 = ir.DoubleType()
    task = ir.Function(m, threadpool.TASK_FN_TYPE, name="busy")
    b = ir.IRBuilder(task.append_basic_block())
    ctx = b.bitcast(task.args[0], I64.as_pointer())
    work = b.load(ctx)
    out = b.bitcast(b.gep(ctx, [i64(1)]), f64.as_pointer())
    with counted_loop(b, task.args[1], task.args[2], name="t") as t:
        acc = b.alloca(f64)
        # the start value comes from memory, so the chain cannot be folded
        b.store(b.load(b.gep(out, [t])), acc)
        with counted_loop(b, i64(0), work):
            b.store(b.fadd(b.fmul(b.load(acc), ir.Constant(f64, 0.999999)),
                           ir.Constant(f64, 1e-6)), acc)
        b.store(b.load(acc), b.gep(out, [t]))
    b.ret_void()
    run = ir.Function(m, ir.FunctionType(ir.VoidType(), [threadpool.VOIDPTR, I32, I64]),
                      name="repeat")
    b = ir.IRBuilder(run.append_basic_block())
    with counted_loop(b, i64(0), run.args[2]):
        b.call(threadpool.declare_parallel_for(m), [task, run.args[0], i64(2), run.args[1]])
    b.ret_void()
    engine = jit.compile_module(m)
    repeat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64)(
        engine.get_function_address("repeat"))
    rows = []
    for work in (0, 500, 2000):
        buf = np.full(3, 0.5)
        buf.view(np.int64)[0] = work
        per = {}
        for threads in (1, 2):
            best = None
            for _ in range(runs):
                start = time.perf_counter()
                repeat(buf.ctypes.data, threads, reps)
                elapsed = (time.perf_counter() - start) / reps
                best = elapsed if best is None else min(best, elapsed)
            per[threads] = best
        rows.append((work, f"{per[1] * 1e6:.3f}", f"{per[2] * 1e6:.3f}",
                     f"{(per[2] - per[1] / 2) * 1e6:.3f}"))
    return rows


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main(args):
    import torch
    print(f"threads: {args.threads}; torch {torch.__version__}, numpy {np.__version__}; "
          f"median / min ms over {args.repeats} alternated calls\n")
    for title, program, inputs, numpy_fn, torch_fn, flops in kernel_benchmarks():
        rows, compile_s = kernel_rows(args.repeats, args.threads, program, inputs, numpy_fn,
                                      torch_fn, flops)
        print(f"## gemm kernel from contraction detection: {title} (compile {compile_s:.2f} s)"
              f"\n")
        print(_table(["", "ms (median / min)", "GFLOP/s (median)",
                      f"time / PyTorch ({args.threads} threads)",
                      "GFLOP/s per CPU second (best; single-threaded rows)"], rows))
        print()
    print("\n## native thread pool: one fork-join of two tasks from JIT code (best of 40 "
          "runs of 2000)\n")
    print(_table(["steps per task", "1 thread us", "2 threads us",
                  "fork-join overhead us (2-thread time - half the 1-thread time)"],
                 fork_join_rows()))
    cases = all_cases()
    if args.cases:
        # a whole case name may hold commas: it is matched as given before being split
        exact = [c for c in cases if c.name == args.cases]
        wanted = [s.strip() for s in args.cases.split(",") if s.strip()]
        cases = exact or [c for c in cases if any(w in c.name for w in wanted)]
    rows, ratio_rows = run_cases(cases, args.threads, args.repeats)
    print("\n## forward + gradient, float32\n")
    print(_table(["case", "tegrad ms", "numpy ms", "PyTorch ms", "tegrad / PyTorch",
                  "numpy / PyTorch", "tegrad GFLOP/s", "PyTorch GFLOP/s", "compile s"], rows))
    if ratio_rows:
        print("\n## gradient / forward time (medians of the table above)\n")
        print(_table(["case", "tegrad", "numpy", "PyTorch"],
                     ratio_table(ratio_rows, median_ratio)))
        print("\n## gradient / forward time, each contender's two programs alternated with "
              "each other only\n")
        print(_table(["case", "tegrad", "numpy", "PyTorch"],
                     ratio_table(ratio_rows, paired_ratio(args.repeats))))


if __name__ == "__main__":
    main(ARGS)
