"""Operators beyond peers.py's cases: forward + gradient of each against PyTorch.

    python benchmarks/operators.py [--threads N] [--repeats R] [names...]

Per operator of ``tegrad.nn`` and ``tegrad.ops`` (float32, a random output gradient
``head`` as an input, as in a training step: the loss is ``sum(op(inputs) * head)``),
tegrad's compiled forward + gradients and PyTorch's ``autograd.grad`` are called
alternately in one process, each timed call after a warm-up of its own begun once the
other's threads are quiet (``peers.alternate``); the table gives median / min ms of each, their ratio of
medians, tegrad's build time and the largest difference from PyTorch's results
(relative to each result's largest magnitude). Names on the command line keep the
cases whose name contains one of them. Needs the ``bench`` extra (PyTorch).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import tegrad as tg
from tegrad import nn, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import alternate  # noqa: E402


def _cases(F, torch):
    """``(name, input shapes, tegrad op, torch op, indices of positive inputs)``."""
    return [
        ("layer norm 256x1024", [(256, 1024)],
         lambda x: ops.divide(ops.subtract(x, ops.mean(x, axis=1, keepdims=True)),
                              ops.sqrt(ops.add(ops.variance(x, axis=1, keepdims=True), 1e-5))),
         lambda x: F.layer_norm(x, (1024,)), ()),
        ("log_softmax 256x1000", [(256, 1000)], nn.log_softmax,
         lambda x: F.log_softmax(x, -1), ()),
        ("softmax 256x1000", [(256, 1000)], nn.softmax, lambda x: F.softmax(x, -1), ()),
        ("tanh(a) * sigmoid(b) 1024x1024", [(1024, 1024)] * 2,
         lambda a, b: ops.multiply(ops.tanh(a), ops.sigmoid(b)),
         lambda a, b: torch.tanh(a) * torch.sigmoid(b), ()),
        ("log(x) + sqrt(x) 1024x1024", [(1024, 1024)],
         lambda x: ops.add(ops.log(x), ops.sqrt(x)), lambda x: torch.log(x) + torch.sqrt(x),
         (0,)),
        ("x ** 2.5 1024x1024", [(1024, 1024)], lambda x: ops.power(x, 2.5),
         lambda x: torch.pow(x, 2.5), (0,)),
        ("batched matmul 16x128x64 @ 16x64x128", [(16, 128, 64), (16, 64, 128)], ops.matmul,
         torch.matmul, ()),
        ("matmul 256x512 @ 512x256", [(256, 512), (512, 256)], ops.matmul, torch.matmul, ()),
        ("conv2d 1x1 8x64x32x32 -> 128", [(8, 64, 32, 32), (128, 64, 1, 1)], nn.conv2d,
         F.conv2d, ()),
        ("conv2d 5x5 p2 8x16x32x32 -> 32", [(8, 16, 32, 32), (32, 16, 5, 5)],
         lambda x, w: nn.conv2d(x, w, padding=2), lambda x, w: F.conv2d(x, w, padding=2), ()),
        ("conv2d 3x3 s2 p1 32x3x64x64 -> 32 (first layer)", [(32, 3, 64, 64), (32, 3, 3, 3)],
         lambda x, w: nn.conv2d(x, w, stride=2, padding=1),
         lambda x, w: F.conv2d(x, w, stride=2, padding=1), ()),
        ("grouped conv2d g4 3x3 p1 8x64x32x32", [(8, 64, 32, 32), (64, 16, 3, 3)],
         lambda x, w: nn.conv2d(x, w, padding=1, groups=4),
         lambda x, w: F.conv2d(x, w, padding=1, groups=4), ()),
        ("depthwise conv2d 3x3 p1 8x64x32x32", [(8, 64, 32, 32), (64, 1, 3, 3)],
         lambda x, w: nn.conv2d(x, w, padding=1, groups=64),
         lambda x, w: F.conv2d(x, w, padding=1, groups=64), ()),
        ("conv2d_transpose 3x3 s2 p1 op1 8x64x16x16 -> 32", [(8, 64, 16, 16), (64, 32, 3, 3)],
         lambda x, w: nn.conv2d_transpose(x, w, stride=2, padding=1, output_padding=1),
         lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), ()),
        ("max_pool 3x3 s2 p1 8x64x56x56", [(8, 64, 56, 56)],
         lambda x: nn.max_pool2d(x, 3, stride=2, padding=1),
         lambda x: F.max_pool2d(x, 3, stride=2, padding=1), ()),
        ("avg_pool 2x2 8x64x32x32", [(8, 64, 32, 32)], lambda x: nn.avg_pool2d(x, 2),
         lambda x: F.avg_pool2d(x, 2), ()),
        ("global_avg_pool 32x256x8x8", [(32, 256, 8, 8)], nn.global_avg_pool2d,
         lambda x: F.adaptive_avg_pool2d(x, 1), ()),
        ("upsampling nearest x2 8x64x32x32", [(8, 64, 32, 32)], lambda x: nn.upsampling(x, 2),
         lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), ()),
        ("upsampling bilinear x2 8x32x32x32", [(8, 32, 32, 32)],
         lambda x: nn.upsampling(x, 2, method="bilinear"),
         lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), ()),
        ("lrn 5 8x64x32x32", [(8, 64, 32, 32)],
         lambda x: nn.lrn(x, 5, alpha=1e-4, beta=0.75, bias=2.0),
         lambda x: F.local_response_norm(x, 5, alpha=1e-4, beta=0.75, k=2.0), ()),
        ("mse_loss 1024x1024", [(1024, 1024)] * 2, nn.mse_loss, F.mse_loss, ()),
        ("transpose 1024x1024", [(1024, 1024)], ops.transpose, lambda x: x.t().contiguous(),
         ()),
        ("concatenate 2 x 512x1024 on axis 1", [(512, 1024)] * 2,
         lambda a, b: ops.concatenate([a, b], axis=1), lambda a, b: torch.cat([a, b], 1), ()),
        ("pad 8x64x32x32 by 1", [(8, 64, 32, 32)],
         lambda x: ops.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), lambda x: F.pad(x, (1, 1, 1, 1)),
         ()),
        ("prod over 16 of 4096x16", [(4096, 16)], lambda x: ops.prod(x, axis=1),
         lambda x: torch.prod(x, 1), ()),
        ("max with its index over 1000 of 256x1000", [(256, 1000)],
         lambda x: ops.argmax_with_value(x, axis=1)[1], lambda x: torch.max(x, 1).values, ()),
        ("mean + variance over 1024 of 256x1024 (one pass)", [(256, 1024)],
         lambda x: ops.add(*ops.mean_var(x, axis=1)),
         lambda x: sum(torch.var_mean(x, 1, correction=0)), ()),
    ]


def run_case(case, repeats, threads, torch, rng):
    name, shapes, tegrad_op, torch_op, positive = case
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for i in positive:
        arrays[i] = np.abs(arrays[i]) + np.float32(0.5)
    inputs = [tg.placeholder(s, name=f"in{i}") for i, s in enumerate(shapes)]
    out = tegrad_op(*inputs)
    head = tg.placeholder(out.shape, name="head")
    head_value = rng.standard_normal(out.shape).astype(np.float32)
    grads = tg.differentiate(ops.sum(ops.multiply(out, head)), inputs)
    start = time.perf_counter()
    f = tg.build(inputs + [head], [out, *grads], threads=threads)
    build = time.perf_counter() - start
    leaves = [torch.from_numpy(a.copy()).requires_grad_(True) for a in arrays]
    torch_head = torch.from_numpy(head_value)

    def torch_step():
        y = torch_op(*leaves)
        g = torch.autograd.grad((y * torch_head).sum(), leaves)
        return [y.detach().numpy(), *[t.numpy() for t in g]]

    def tegrad_step():
        return f(*arrays, head_value)

    error = max(float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))
                for a, b in zip(tegrad_step(), torch_step()))
    times = alternate({"tegrad": tegrad_step, "torch": torch_step}, repeats)
    a, b = np.array(times["tegrad"]) * 1e3, np.array(times["torch"]) * 1e3
    return (f"| {name} | {np.median(a):.3f} / {a.min():.3f} | {np.median(b):.3f} / "
            f"{b.min():.3f} | {np.median(a) / np.median(b):.2f} | {build:.2f} | {error:.1e} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("names", nargs="*")
    args = p.parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.exit("benchmarks/operators.py needs PyTorch: pip install -e '.[bench]'")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"forward + gradients, {args.threads} threads, ms median / min of {args.repeats} "
          f"alternated calls\n")
    print("| case | tegrad | PyTorch | tegrad / PyTorch | build s | max rel. difference |")
    print("|---|---|---|---|---|---|")
    for case in _cases(F, torch):
        if args.names and not any(n in case[0] for n in args.names):
            continue
        print(run_case(case, args.repeats, args.threads, torch, rng), flush=True)


if __name__ == "__main__":
    main()
