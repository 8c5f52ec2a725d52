"""One process of the DistributedDataParallel test (tests/torch/test_ddp.py), also usable
under torchrun: trains one step of a model holding a tegrad operator on its share of a
fixed batch and saves its parameters' gradients to ``<prefix><rank>.pt``.

    python tests/support/ddp_worker.py PREFIX   (with MASTER_ADDR, MASTER_PORT, RANK and
                                                 WORLD_SIZE set, as torchrun sets them)
"""
import sys

import torch

import tegrad as tg
import tegrad.torch

BATCH, FEATURES, HIDDEN = 8, 5, 6


def tanh_dense(rows):
    """``tanh(x @ w.T)`` on ``rows`` rows, as a tegrad operator of (x, w)."""
    x = tg.placeholder((rows, FEATURES), dtype="float64", name="x")
    w = tg.placeholder((HIDDEN, FEATURES), dtype="float64", name="w")
    k = tg.reduce_axis((0, FEATURES), name="k")
    y = tg.compute((rows, HIDDEN), lambda i, j: tg.tanh(tg.sum(x[i, k] * w[j, k], axis=k)),
                   name="y")
    return tegrad.torch.operator([x, w], [y], name=f"ddp_tanh_dense_{rows}")


class Model(torch.nn.Module):
    def __init__(self, rows):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(HIDDEN, FEATURES, dtype=torch.float64,
                                                generator=g))
        self.out = torch.nn.Linear(HIDDEN, 1, dtype=torch.float64)
        with torch.no_grad():
            self.out.weight.copy_(torch.randn(1, HIDDEN, dtype=torch.float64, generator=g))
            self.out.bias.zero_()
        self.layer = tanh_dense(rows)

    def forward(self, x):
        return self.out(self.layer(x, self.w))


def batch():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(BATCH, FEATURES, dtype=torch.float64, generator=g),
            torch.randn(BATCH, 1, dtype=torch.float64, generator=g))


def gradients(model, x, target):
    """The parameters' gradients of the mean squared error on (x, target)."""
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def main(prefix):
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    rows = BATCH // world
    model = torch.nn.parallel.DistributedDataParallel(Model(rows))
    x, target = batch()
    share = slice(rank * rows, (rank + 1) * rows)
    grads = gradients(model, x[share], target[share])  # DDP averages them over the ranks
    torch.save({name.removeprefix("module."): g for name, g in grads.items()},
               f"{prefix}{rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
