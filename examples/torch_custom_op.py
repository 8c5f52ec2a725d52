"""A fused layer norm + GELU written in tegrad, trained inside a PyTorch model.

The operator is a few lines of tg.compute; tegrad.torch.operator compiles it and its
gradients and registers it as torch.ops.tegrad.layer_norm_gelu_<rows>x<features>. Two copies of the same
classifier (linear -> layer norm -> GELU -> linear) start from the same weights and train
on the same batches with torch.optim.Adam: one with the tegrad operator, one with
PyTorch's layer_norm and gelu. The script prints both losses as they train, then the time
per training step of each (forward, backward and optimiser step, timed alternately).

    python examples/torch_custom_op.py [--steps 300] [--batch 256] [--hidden 512] [--threads N]
    python examples/torch_custom_op.py --overhead   # a call's cost over the compiled function

Under torchrun (several processes, on one machine or several) each process trains on its
share of every batch inside DistributedDataParallel with the gloo backend; see the
README's section "tegrad inside PyTorch".
"""
import argparse
import math
import os
import time

import torch
import torch.nn.functional as F

import tegrad as tg
import tegrad.torch

EPS = 1e-5


def layer_norm_gelu_program(rows, features, dtype="float32"):
    """``y = gelu(layer_norm(x) * gamma + beta)`` over the last axis (GELU in its tanh
    form), as tegrad tensors."""
    x = tg.placeholder((rows, features), dtype=dtype, name="x")
    gamma = tg.placeholder((features,), dtype=dtype, name="gamma")
    beta = tg.placeholder((features,), dtype=dtype, name="beta")
    k = tg.reduce_axis((0, features), name="k")
    mean = tg.compute((rows,), lambda i: tg.sum(x[i, k], axis=k) / features, name="mean")
    k2 = tg.reduce_axis((0, features), name="k2")
    var = tg.compute((rows,), lambda i: tg.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]),
                                               axis=k2) / features, name="var")
    inv = tg.compute((rows,), lambda i: 1.0 / tg.sqrt(var[i] + EPS), name="inv")
    z = tg.compute((rows, features),
                   lambda i, j: (x[i, j] - mean[i]) * inv[i] * gamma[j] + beta[j], name="z")
    # GELU's tanh form (PyTorch's approximate="tanh"): tegrad's tanh is vectorised, its erf
    # is one scalar call per element
    c = math.sqrt(2.0 / math.pi)
    y = tg.compute((rows, features),
                   lambda i, j: 0.5 * z[i, j] * (1.0 + tg.tanh(
                       c * (z[i, j] + 0.044715 * z[i, j] * z[i, j] * z[i, j]))),
                   name="y")
    return [x, gamma, beta], [y]


class Classifier(torch.nn.Module):
    """linear -> layer norm -> GELU -> linear; ``norm_gelu(h, gamma, beta)`` is either the
    tegrad operator or PyTorch's operators."""

    def __init__(self, features, hidden, classes, norm_gelu):
        super().__init__()
        self.first = torch.nn.Linear(features, hidden)
        self.gamma = torch.nn.Parameter(torch.ones(hidden))
        self.beta = torch.nn.Parameter(torch.zeros(hidden))
        self.last = torch.nn.Linear(hidden, classes)
        self.norm_gelu = norm_gelu

    def forward(self, x):
        return self.last(self.norm_gelu(self.first(x), self.gamma, self.beta))


def torch_norm_gelu(h, gamma, beta):
    return F.gelu(F.layer_norm(h, h.shape[-1:], gamma, beta, eps=EPS), approximate="tanh")


def batches(steps, batch, features, classes, seed):
    """Inputs with the labels of a random linear teacher (the same on every process)."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(features, classes, generator=g)
    for _ in range(steps):
        x = torch.randn(batch, features, generator=g)
        yield x, (x @ teacher).argmax(dim=1)


def step_fn(model, optimiser):
    def step(x, labels):
        optimiser.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        optimiser.step()
        return loss.detach()
    return step


def call_overhead(op, tensors, calls=2000, rounds=30):
    """Microseconds of CPU per call of ``op`` (no gradient) and of its compiled function
    on the same memory: ``{"operator": [...], "compiled": [...]}``, one figure per round
    of ``calls`` calls of each, the two alternated round by round."""
    arrays = [t.numpy() for t in tensors]
    runs = {"operator": lambda: op(*tensors), "compiled": lambda: op.function(*arrays)}
    us = {name: [] for name in runs}
    with torch.no_grad():
        for _ in range(rounds):
            for name, run in runs.items():
                t0 = time.process_time()
                for _ in range(calls):
                    run()
                us[name].append((time.process_time() - t0) / calls * 1e6)
    return us


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=None,
                   help="threads of PyTorch and of the tegrad operator (default: each its own)")
    p.add_argument("--overhead", action="store_true",
                   help="only time a call of a tiny operator against its compiled function")
    args = p.parse_args(argv)
    if args.overhead:
        us = call_overhead(tegrad.torch.operator(*layer_norm_gelu_program(2, 4),
                                                 name="layer_norm_gelu_2x4", threads=1),
                           [torch.randn(2, 4), torch.ones(4), torch.zeros(4)])
        # each round's difference: both of a round ran under the same load
        us["overhead"] = [a - b for a, b in zip(us["operator"], us["compiled"])]
        print(f"us per call (median, min of {len(us['overhead'])} rounds): " + ", ".join(
            f"{name} {median(v):.2f}, {min(v):.2f}" for name, v in us.items()))
        return us
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:  # started by torchrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE set
        torch.distributed.init_process_group("gloo")
    if args.batch % world:
        p.error(f"--batch {args.batch} does not split over {world} processes")
    rows = args.batch // world

    start = time.perf_counter()
    op = tegrad.torch.operator(*layer_norm_gelu_program(rows, args.hidden),
                               name=f"layer_norm_gelu_{rows}x{args.hidden}",
                               threads=args.threads)
    op.vjp((True, True, True))  # the backward's compile, done here rather than in step 1
    compile_s = time.perf_counter() - start

    torch.manual_seed(args.seed)
    models = {"tegrad": Classifier(args.features, args.hidden, args.classes, op)}
    models["pytorch"] = Classifier(args.features, args.hidden, args.classes, torch_norm_gelu)
    models["pytorch"].load_state_dict(models["tegrad"].state_dict())
    if world > 1:
        models = {k: torch.nn.parallel.DistributedDataParallel(m) for k, m in models.items()}
    steps = {k: step_fn(m, torch.optim.Adam(m.parameters(), lr=args.lr))
             for k, m in models.items()}

    times = {k: [] for k in steps}
    losses = {k: [] for k in steps}
    if rank == 0:
        print(f"{world} process(es), {rows} rows each; tegrad operator compiled in "
              f"{compile_s:.2f} s")
        print(f"{'step':>6} {'tegrad loss':>12} {'pytorch loss':>13}")
    data = batches(args.steps, args.batch, args.features, args.classes, args.seed)
    for n, (x, labels) in enumerate(data):
        x, labels = x[rank * rows:(rank + 1) * rows], labels[rank * rows:(rank + 1) * rows]
        # alternate which model goes first, so neither always runs on a warmer cache
        for name in (sorted(steps) if n % 2 else sorted(steps, reverse=True)):
            t0 = time.perf_counter()
            loss = steps[name](x, labels)
            times[name].append(time.perf_counter() - t0)
            losses[name].append(float(loss))
        if rank == 0 and (n % args.print_every == 0 or n == args.steps - 1):
            print(f"{n:>6} {losses['tegrad'][-1]:>12.6f} {losses['pytorch'][-1]:>13.6f}")

    warm = slice(min(5, max(args.steps - 1, 0)), None)  # the first steps warm up
    ms = {k: median(v[warm]) * 1e3 for k, v in times.items()}
    if rank == 0:
        gap = max(abs(a - b) for a, b in zip(losses["tegrad"], losses["pytorch"]))
        print(f"largest loss difference: {gap:.2e}")
        print(f"ms per training step (median): tegrad {ms['tegrad']:.3f}, "
              f"pytorch {ms['pytorch']:.3f}")
    if world > 1:
        torch.distributed.destroy_process_group()
    return losses, ms


if __name__ == "__main__":
    main()
