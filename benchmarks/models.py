"""Whole models, one training step each (the loss and every parameter's gradient), in
tegrad against PyTorch eager, ``torch.compile`` and JAX.

    python benchmarks/models.py [--models lenet,resnet,...] [--threads 1,2] [--repeats 30]
                                [--quick] [--contenders tegrad,eager,compile,jax]
                                [--steps 300] [--stages] [--profile]

The models, float32, written with the public API (``tegrad.nn`` layers, ``tg.compute``
where a cell is plainest as an index lambda):

- ``lenet``: LeNet-5, batch 64, 1x28x28 input (conv 5x5 p2 -> relu -> max_pool 2 ->
  conv 5x5 -> relu -> max_pool 2 -> 120 -> 84 -> 10, cross-entropy);
- ``resnet``: a ResNet basic block with training batch norm, batch 16, 64x16x16
  (conv 3x3 -> BN -> relu -> conv 3x3 -> BN -> + x -> relu), the loss ``sum(out * head)``
  for a random output gradient ``head``; the input's gradient is taken too (a block
  inside a network needs it);
- ``transformer``: a pre-LN transformer block (B8, T64, d128, 4 heads, causal, GELU MLP
  512, vocabulary 96): token and position embeddings in, logits and cross-entropy out;
- ``gru``: a GRU unrolled 16 steps (B32, H128, input 128), the input projected for all
  steps at once, the loss ``sum(hidden states * head)`` for a random ``head``;
- ``tcn``: a causal dilated conv1d net (dilations 1/2/4, kernel 3, residual, 64
  channels, L128, B16), the loss ``sum(out * head)``;
- ``charlm``: the transformer trained as a character language model on this repository's
  own Markdown files (bundled text, no download) for ``--steps`` steps, with Adam written
  in numpy for tegrad and ``torch.optim.Adam`` for PyTorch, from equal weights on equal
  batches: both loss curves and the time per step.

Before timing, every contender's loss and gradients are compared with PyTorch's in
float64 (largest difference over the largest magnitude, per array; a model whose
contender differs by more than 1e-3 is marked MISMATCH). Each thread count runs in a
process of its own (``torch.set_num_threads``, tegrad's ``threads=``, the BLAS variables;
JAX: XLA's intra-op thread count flag at 1 thread), and the contenders are timed
alternately as ``peers.alternate`` does: each timed call follows 20 ms of calls of the
same contender, begun once the other runtimes' threads have stopped spinning.

Peak memory (MB, where measurable; inputs and parameters not counted): tegrad, the numpy
buffers the compiled step owns (its workspace: temporaries and the products' packing
space) and its outputs (tracemalloc's numpy domain); PyTorch eager and compiled, the
highest sum of the bytes the step had allocated and not yet freed, over every allocation
and free of PyTorch's CPU allocator in time order (the profiler's allocation records:
activations saved for backward, gradients, and each operator's own scratch memory, which
a count per operator misses); JAX, XLA's memory analysis of the compiled step
(temporaries + outputs).

``--stages`` also prints, per model, tegrad's schedule and the cost of its ten costliest
stages, and the ten operators of PyTorch eager's step that take most time (profiler).
``--profile`` prints, per model, ``f.profile()`` of tegrad's step built again with
``profile=True`` (per top-level statement: calls, time, share of the step, GFLOP/s, MB
moved) after as many calls as ``--repeats``; the timed step is the unprofiled one.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))

import numpy as np  # noqa: E402

import tegrad as tg  # noqa: E402
from tegrad import nn, ops  # noqa: E402

TOLERANCE = 1e-3


# -- model definitions ---------------------------------------------------------------------


@dataclass
class Input:
    """An input of a model: float values drawn ``normal * scale`` (or ``init`` "ones" /
    "zeros"), or integer ``ids`` in ``[0, high)``; ``grad``: its gradient is computed."""

    name: str
    shape: tuple
    grad: bool = False
    scale: float = 1.0
    init: str = "normal"
    high: int = 0

    @property
    def is_ids(self):
        return self.init == "ids"


def param(name, shape, fan_in=None, init="normal"):
    scale = 1.0 / math.sqrt(fan_in) if fan_in else 1.0
    return Input(name, tuple(shape), grad=True, scale=scale, init=init)


def data(name, shape, scale=1.0, init="normal"):
    return Input(name, tuple(shape), scale=scale, init=init)


def ids(name, shape, high):
    return Input(name, tuple(shape), init="ids", high=high)


@dataclass
class Model:
    """A training step: ``tegrad(t)``, ``torch(t)`` and ``jax(t)`` compute the scalar
    loss from a dict of the inputs by name (tegrad placeholders, torch tensors, JAX
    arrays); the gradients are those of the inputs whose ``grad`` is set."""

    name: str
    title: str
    inputs: list
    tegrad: Callable
    torch: Callable
    jax: Optional[Callable] = None
    dtype: str = "float32"

    @property
    def wrt(self):
        return [i.name for i in self.inputs if i.grad]

    def arrays(self, rng):
        """Random inputs by name (integers as int64; :meth:`feed` converts)."""
        out = {}
        for i in self.inputs:
            if i.is_ids:
                out[i.name] = rng.integers(0, i.high, i.shape).astype(np.int64)
            elif i.init == "ones":
                out[i.name] = np.ones(i.shape, self.dtype)
            elif i.init == "zeros":
                out[i.name] = np.zeros(i.shape, self.dtype)
            else:
                out[i.name] = (rng.standard_normal(i.shape) * i.scale).astype(self.dtype)
        return out

    def program(self):
        """``(placeholders, [loss, *gradients], differentiate seconds)``."""
        ph = {i.name: tg.placeholder(i.shape, dtype="int32" if i.is_ids else self.dtype,
                                     name=i.name) for i in self.inputs}
        loss = self.tegrad(ph)
        start = time.perf_counter()
        grads = tg.differentiate(loss, [ph[n] for n in self.wrt])
        seconds = time.perf_counter() - start
        return [ph[i.name] for i in self.inputs], [loss, *grads], seconds

    def tegrad_args(self, arrays):
        return [arrays[i.name].astype(np.int32) if i.is_ids else arrays[i.name]
                for i in self.inputs]


# LeNet-5 ------------------------------------------------------------------------------------


def lenet(batch=64, size=28, dtype="float32"):
    features = 16 * ((size // 2 - 4) // 2) ** 2      # 400 for 28x28 images
    inputs = [data("x", (batch, 1, size, size)), ids("labels", (batch,), 10),
              param("c1", (6, 1, 5, 5), 25), param("c1b", (6,), 25),
              param("c2", (16, 6, 5, 5), 150), param("c2b", (16,), 150),
              param("f1", (120, features), features), param("f1b", (120,), features),
              param("f2", (84, 120), 120), param("f2b", (84,), 120),
              param("f3", (10, 84), 84), param("f3b", (10,), 84)]

    def tegrad_loss(t):
        h = nn.max_pool2d(nn.relu(nn.bias_add(nn.conv2d(t["x"], t["c1"], padding=2), t["c1b"])), 2)
        h = nn.max_pool2d(nn.relu(nn.bias_add(nn.conv2d(h, t["c2"]), t["c2b"])), 2)
        h = nn.relu(nn.dense(ops.flatten(h), t["f1"], t["f1b"]))
        h = nn.relu(nn.dense(h, t["f2"], t["f2b"]))
        return nn.softmax_cross_entropy(nn.dense(h, t["f3"], t["f3b"]), t["labels"])

    def torch_loss(t):
        import torch.nn.functional as F
        h = F.max_pool2d(F.relu(F.conv2d(t["x"], t["c1"], t["c1b"], padding=2)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, t["c2"], t["c2b"])), 2)
        h = F.relu(F.linear(h.flatten(1), t["f1"], t["f1b"]))
        h = F.relu(F.linear(h, t["f2"], t["f2b"]))
        return F.cross_entropy(F.linear(h, t["f3"], t["f3b"]), t["labels"])

    def jax_loss(t):
        import jax
        h = _jax_max_pool2(jax.nn.relu(_jax_conv2d(t["x"], t["c1"], 2) + t["c1b"][:, None, None]))
        h = _jax_max_pool2(jax.nn.relu(_jax_conv2d(h, t["c2"], 0) + t["c2b"][:, None, None]))
        h = jax.nn.relu(h.reshape(h.shape[0], -1) @ t["f1"].T + t["f1b"])
        h = jax.nn.relu(h @ t["f2"].T + t["f2b"])
        return _jax_cross_entropy(h @ t["f3"].T + t["f3b"], t["labels"])

    return Model("lenet", f"LeNet-5, batch {batch}, 1x{size}x{size}", inputs, tegrad_loss, torch_loss,
                 jax_loss, dtype)


# ResNet basic block ---------------------------------------------------------------------------


def resnet_block(batch=16, channels=64, size=16, dtype="float32"):
    c = channels
    inputs = [Input("x", (batch, c, size, size), grad=True),
              param("w1", (c, c, 3, 3), 9 * c), param("g1", (c,), init="ones"),
              param("b1", (c,), init="zeros"),
              param("w2", (c, c, 3, 3), 9 * c), param("g2", (c,), init="ones"),
              param("b2", (c,), init="zeros"),
              data("head", (batch, c, size, size))]

    def tegrad_loss(t):
        h, _, _ = nn.batch_norm(nn.conv2d(t["x"], t["w1"], padding=1), t["g1"], t["b1"])
        h, _, _ = nn.batch_norm(nn.conv2d(nn.relu(h), t["w2"], padding=1), t["g2"], t["b2"])
        out = nn.relu(h + t["x"])
        return (out * t["head"]).sum()

    def torch_loss(t):
        import torch.nn.functional as F
        h = F.batch_norm(F.conv2d(t["x"], t["w1"], padding=1), None, None, t["g1"], t["b1"],
                         training=True)
        h = F.batch_norm(F.conv2d(F.relu(h), t["w2"], padding=1), None, None, t["g2"],
                         t["b2"], training=True)
        return (F.relu(h + t["x"]) * t["head"]).sum()

    def jax_loss(t):
        import jax
        h = _jax_batch_norm(_jax_conv2d(t["x"], t["w1"], 1), t["g1"], t["b1"])
        h = _jax_batch_norm(_jax_conv2d(jax.nn.relu(h), t["w2"], 1), t["g2"], t["b2"])
        return (jax.nn.relu(h + t["x"]) * t["head"]).sum()

    return Model("resnet", f"ResNet basic block, training BN, batch {batch}, "
                 f"{c}x{size}x{size}", inputs, tegrad_loss, torch_loss, jax_loss, dtype)


# pre-LN transformer block -----------------------------------------------------------------


def transformer_inputs(batch, seq, d, mlp, vocab):
    return [ids("ids", (batch, seq), vocab), ids("targets", (batch, seq), vocab),
            param("tok", (vocab, d), init="normal"), param("pos", (seq, d), init="normal"),
            param("ln1_g", (d,), init="ones"), param("ln1_b", (d,), init="zeros"),
            param("w_q", (d, d), d), param("w_k", (d, d), d), param("w_v", (d, d), d),
            param("w_o", (d, d), d), param("b_q", (d,), init="zeros"),
            param("b_k", (d,), init="zeros"), param("b_v", (d,), init="zeros"),
            param("b_o", (d,), init="zeros"),
            param("ln2_g", (d,), init="ones"), param("ln2_b", (d,), init="zeros"),
            param("w1", (mlp, d), d), param("b1", (mlp,), init="zeros"),
            param("w2", (d, mlp), mlp), param("b2", (d,), init="zeros"),
            param("lnf_g", (d,), init="ones"), param("lnf_b", (d,), init="zeros"),
            param("w_out", (vocab, d), d), param("b_out", (vocab,), init="zeros")]


def transformer(batch=8, seq=64, d=128, heads=4, mlp=512, vocab=96, dtype="float32"):
    inputs = transformer_inputs(batch, seq, d, mlp, vocab)
    for i in inputs:          # embeddings of a small standard deviation, as GPT-2's
        if i.name in ("tok", "pos"):
            i.scale = 0.02

    def tegrad_loss(t):
        h = nn.embedding(t["tok"], t["ids"]) + t["pos"]
        a = nn.layer_norm(h, t["ln1_g"], t["ln1_b"])
        h = h + nn.multi_head_attention(a, a, a, t["w_q"], t["w_k"], t["w_v"], t["w_o"],
                                        num_heads=heads, b_q=t["b_q"], b_k=t["b_k"],
                                        b_v=t["b_v"], b_o=t["b_o"], causal=True)
        m = nn.gelu(nn.dense(nn.layer_norm(h, t["ln2_g"], t["ln2_b"]), t["w1"], t["b1"]))
        h = h + nn.dense(m, t["w2"], t["b2"])
        logits = nn.dense(nn.layer_norm(h, t["lnf_g"], t["lnf_b"]), t["w_out"], t["b_out"])
        return nn.softmax_cross_entropy(logits.reshape(batch * seq, vocab),
                                        t["targets"].reshape(batch * seq))

    def torch_loss(t):
        import torch.nn.functional as F
        h = F.embedding(t["ids"], t["tok"]) + t["pos"]
        a = F.layer_norm(h, (d,), t["ln1_g"], t["ln1_b"])

        def split(w, b):
            return F.linear(a, w, b).view(batch, seq, heads, d // heads).transpose(1, 2)

        att = F.scaled_dot_product_attention(split(t["w_q"], t["b_q"]), split(t["w_k"], t["b_k"]),
                                             split(t["w_v"], t["b_v"]), is_causal=True)
        h = h + F.linear(att.transpose(1, 2).reshape(batch, seq, d), t["w_o"], t["b_o"])
        m = F.gelu(F.linear(F.layer_norm(h, (d,), t["ln2_g"], t["ln2_b"]), t["w1"], t["b1"]))
        h = h + F.linear(m, t["w2"], t["b2"])
        logits = F.linear(F.layer_norm(h, (d,), t["lnf_g"], t["lnf_b"]), t["w_out"], t["b_out"])
        return F.cross_entropy(logits.reshape(-1, vocab), t["targets"].reshape(-1))

    def jax_loss(t):
        import jax
        import jax.numpy as jnp
        h = t["tok"][t["ids"]] + t["pos"]
        a = _jax_layer_norm(h, t["ln1_g"], t["ln1_b"])

        def split(w, b):
            return (a @ w.T + b).reshape(batch, seq, heads, d // heads).transpose(0, 2, 1, 3)

        q, k, v = (split(t["w_q"], t["b_q"]), split(t["w_k"], t["b_k"]),
                   split(t["w_v"], t["b_v"]))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads)
        causal = jnp.tril(jnp.ones((seq, seq), bool))
        p = jax.nn.softmax(jnp.where(causal, s, -jnp.inf), axis=-1)
        att = (p @ v).transpose(0, 2, 1, 3).reshape(batch, seq, d)
        h = h + att @ t["w_o"].T + t["b_o"]
        m = jax.nn.gelu(_jax_layer_norm(h, t["ln2_g"], t["ln2_b"]) @ t["w1"].T + t["b1"],
                        approximate=False)
        h = h + m @ t["w2"].T + t["b2"]
        logits = _jax_layer_norm(h, t["lnf_g"], t["lnf_b"]) @ t["w_out"].T + t["b_out"]
        return _jax_cross_entropy(logits.reshape(-1, vocab), t["targets"].reshape(-1))

    return Model("transformer", f"pre-LN transformer block, B{batch} T{seq} d{d} {heads} heads "
                 f"causal, MLP {mlp}, vocabulary {vocab}", inputs, tegrad_loss, torch_loss,
                 jax_loss, dtype)


# GRU -----------------------------------------------------------------------------------


def gru(steps=16, batch=32, hidden=128, features=128, dtype="float32"):
    H = hidden
    inputs = [data("x", (steps, batch, features)), data("h0", (batch, H), init="zeros"),
              param("w_ih", (3 * H, features), H), param("w_hh", (3 * H, H), H),
              param("b_ih", (3 * H,), H), param("b_hh", (3 * H,), H),
              data("head", (steps, batch, H))]

    def tegrad_loss(t):
        gi = nn.dense(t["x"], t["w_ih"], t["b_ih"])       # every step's input projection
        h, head, terms = t["h0"], t["head"], []
        for s in range(steps):
            gh = nn.dense(h, t["w_hh"], t["b_hh"])
            r = tg.compute((batch, H), lambda b, j: tg.sigmoid(gi[s, b, j] + gh[b, j]),
                           name=f"r{s}")
            z = tg.compute((batch, H), lambda b, j: tg.sigmoid(gi[s, b, H + j] + gh[b, H + j]),
                           name=f"z{s}")
            n = tg.compute((batch, H), lambda b, j: tg.tanh(gi[s, b, 2 * H + j]
                                                            + r[b, j] * gh[b, 2 * H + j]),
                           name=f"n{s}")
            prev = h
            h = tg.compute((batch, H), lambda b, j: (1 - z[b, j]) * n[b, j] + z[b, j] * prev[b, j],
                           name=f"h{s}")
            kb, kj = tg.reduce_axis((0, batch), name="kb"), tg.reduce_axis((0, H), name="kj")
            terms.append(tg.compute((), lambda: tg.sum(h[kb, kj] * head[s, kb, kj], axis=[kb, kj]),
                                    name=f"term{s}"))
        loss = terms[0]
        for term in terms[1:]:
            loss = loss + term
        return loss

    def torch_loss(t):
        import torch
        import torch.nn.functional as F
        gi = F.linear(t["x"], t["w_ih"], t["b_ih"])
        h, out = t["h0"], []
        for s in range(steps):
            i_r, i_z, i_n = gi[s].chunk(3, -1)
            h_r, h_z, h_n = F.linear(h, t["w_hh"], t["b_hh"]).chunk(3, -1)
            r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = (1 - z) * n + z * h
            out.append(h)
        return (torch.stack(out) * t["head"]).sum()

    def jax_loss(t):
        import jax
        import jax.numpy as jnp
        gi = t["x"] @ t["w_ih"].T + t["b_ih"]
        h, out = t["h0"], []
        for s in range(steps):
            gh = h @ t["w_hh"].T + t["b_hh"]
            r = jax.nn.sigmoid(gi[s, :, :H] + gh[:, :H])
            z = jax.nn.sigmoid(gi[s, :, H:2 * H] + gh[:, H:2 * H])
            n = jnp.tanh(gi[s, :, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
            out.append(h)
        return (jnp.stack(out) * t["head"]).sum()

    return Model("gru", f"GRU unrolled {steps} steps, B{batch} H{H} input {features}", inputs,
                 tegrad_loss, torch_loss, jax_loss, dtype)


# causal dilated conv1d net ----------------------------------------------------------------


def tcn(batch=16, channels=64, length=128, dilations=(1, 2, 4), kernel=3, dtype="float32"):
    c = channels
    inputs = [data("x", (batch, c, length))]
    for i, _ in enumerate(dilations):
        inputs += [param(f"w{i}", (c, c, kernel), c * kernel), param(f"b{i}", (c,), c * kernel)]
    inputs.append(data("head", (batch, c, length)))

    def tegrad_loss(t):
        h = t["x"]
        for i, d in enumerate(dilations):
            y = nn.conv1d(h, t[f"w{i}"], padding=(d * (kernel - 1), 0), dilation=d)
            h = h + nn.relu(nn.bias_add(y, t[f"b{i}"]))
        return (h * t["head"]).sum()

    def torch_loss(t):
        import torch.nn.functional as F
        h = t["x"]
        for i, d in enumerate(dilations):
            y = F.conv1d(F.pad(h, (d * (kernel - 1), 0)), t[f"w{i}"], t[f"b{i}"], dilation=d)
            h = h + F.relu(y)
        return (h * t["head"]).sum()

    def jax_loss(t):
        import jax
        from jax import lax
        h = t["x"]
        for i, d in enumerate(dilations):
            y = lax.conv_general_dilated(h, t[f"w{i}"], (1,), [(d * (kernel - 1), 0)],
                                         rhs_dilation=(d,),
                                         dimension_numbers=("NCH", "OIH", "NCH"))
            h = h + jax.nn.relu(y + t[f"b{i}"][:, None])
        return (h * t["head"]).sum()

    return Model("tcn", f"causal dilated conv1d net, dilations {'/'.join(map(str, dilations))}, "
                 f"{c} channels, L{length}, B{batch}", inputs, tegrad_loss, torch_loss,
                 jax_loss, dtype)


# JAX helpers ----------------------------------------------------------------------------------


def _jax_conv2d(x, w, padding):
    from jax import lax
    return lax.conv_general_dilated(x, w, (1, 1), [(padding, padding)] * 2,
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _jax_max_pool2(x):
    import jax.numpy as jnp
    from jax import lax
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _jax_batch_norm(x, gamma, beta, eps=1e-5):
    import jax.numpy as jnp
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * gamma[:, None, None] + beta[:, None, None]


def _jax_layer_norm(x, gamma, beta, eps=1e-5):
    import jax.numpy as jnp
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * gamma + beta


def _jax_cross_entropy(logits, labels):
    import jax
    import jax.numpy as jnp
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, labels[:, None], axis=-1).mean()


#: the models of the table at their benchmark sizes, by name
MODELS = {"lenet": lenet, "resnet": resnet_block, "transformer": transformer, "gru": gru,
          "tcn": tcn}

#: tiny sizes of each model (the smoke test's)
TINY = {"lenet": dict(batch=2, size=12), "resnet": dict(batch=2, channels=4, size=5),
        "transformer": dict(batch=2, seq=8, d=16, heads=2, mlp=32, vocab=11),
        "gru": dict(steps=3, batch=2, hidden=4, features=5),
        "tcn": dict(batch=2, channels=3, length=12)}


# -- running the contenders ------------------------------------------------------------------


def torch_step(model, fn):
    """A callable computing ``[loss, *grads]`` with PyTorch's ``fn`` (eager or compiled)
    and autograd, and the torch tensors it reads."""
    import torch

    def make(arrays, dtype=None):
        t = {}
        for i in model.inputs:
            a = torch.from_numpy(arrays[i.name].copy())
            if dtype is not None and a.is_floating_point():
                a = a.to(dtype)
            t[i.name] = a.requires_grad_(True) if i.grad else a
        return t

    def step(t):
        loss = fn(t)
        grads = torch.autograd.grad(loss, [t[n] for n in model.wrt])
        return [loss.detach(), *grads]

    return make, step


def torch_reference(model, arrays):
    """``[loss, *grads]`` of PyTorch eager in float64."""
    import torch
    make, step = torch_step(model, model.torch)
    return [v.numpy() for v in step(make(arrays, torch.float64))]


def max_difference(reference, results):
    """The largest difference of any array from the reference, over that array's largest
    magnitude, or over a thousandth of the largest magnitude of any array if larger: a
    gradient that is zero in exact arithmetic (the attention's key bias: softmax ignores
    a shift common to a row) is compared at the scale of the others, not of its
    rounding errors."""
    if len(reference) != len(results):
        return float("inf")
    reference = [np.asarray(r, np.float64) for r in reference]
    floor = 1e-3 * max(float(np.max(np.abs(r))) for r in reference)
    worst = 0.0
    for r, x in zip(reference, results):
        x = np.asarray(x, np.float64).reshape(r.shape)
        scale = max(float(np.max(np.abs(r))), floor) or 1.0
        worst = max(worst, float(np.max(np.abs(x - r))) / scale)
    return worst


def tegrad_contender(model, arrays, threads, memory=True):
    """``(call, results, info)``: the compiled step, its results, and differentiate and
    build seconds and (``memory``) the MB of numpy buffers the step holds: its
    temporaries and outputs, traced by tracemalloc's numpy domain in a second build from
    an empty cache (tracing would slow the timed build)."""
    placeholders, outputs, diff_s = model.program()
    start = time.perf_counter()
    f = tg.build(placeholders, outputs, threads=threads)
    build_s = time.perf_counter() - start
    args = model.tegrad_args(arrays)
    results = f(*args)
    peak = None
    if memory:
        import tracemalloc
        from tegrad.codegen.runtime import clear_cache
        clear_cache()
        tracemalloc.start()
        g = tg.build(placeholders, outputs, threads=threads)
        kept = g(*args)
        numpy_domain = tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)
        snapshot = tracemalloc.take_snapshot().filter_traces([numpy_domain])
        tracemalloc.stop()
        peak = sum(s.size for s in snapshot.statistics("filename")) / 2 ** 20
        del g, kept
    return (lambda: f(*args)), results, {"differentiate_s": diff_s, "build_s": build_s,
                                         "peak_mb": peak, "function": f}


def torch_peak_mb(call):
    """The highest sum of the bytes ``call`` allocated and had not freed yet, over the
    profiler's allocation records (one per allocation and per free of the CPU allocator,
    with its time), so an operator's scratch memory freed before it returns counts too.
    (Summing each operator's net allocation at its start instead missed that: LeNet-5's
    step read 3.0 MB that way and 4.5 MB this way.)"""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    records, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:  # a free is a record of negative size
            records.append((e.start_time_ns, e.extra_fields.alloc_size))
        stack.extend(e.children)
    now = peak = 0
    for _, nbytes in sorted(records):
        now += nbytes
        peak = max(peak, now)
    return peak / 2 ** 20


def torch_contender(model, arrays, compiled):
    import torch
    fn = model.torch
    if compiled:
        fn = torch.compile(model.torch, fullgraph=True)
    make, step = torch_step(model, fn)
    t = make(arrays)
    start = time.perf_counter()
    results = [v.detach().numpy() for v in step(t)]
    first_s = time.perf_counter() - start
    peak = torch_peak_mb(lambda: step(t))
    return (lambda: step(t)), results, {"build_s": first_s if compiled else None,
                                        "peak_mb": peak}


def jax_contender(model, arrays):
    import jax
    import jax.numpy as jnp
    params = {n: jnp.asarray(arrays[n]) for n in model.wrt}
    rest = {i.name: jnp.asarray(arrays[i.name].astype(np.int32) if i.is_ids else arrays[i.name])
            for i in model.inputs if not i.grad}
    f = jax.jit(jax.value_and_grad(lambda p, r: model.jax({**p, **r})))
    start = time.perf_counter()
    compiled = f.lower(params, rest).compile()
    loss, grads = jax.block_until_ready(compiled(params, rest))
    build_s = time.perf_counter() - start
    peak = None
    try:
        m = compiled.memory_analysis()
        peak = (m.temp_size_in_bytes + m.output_size_in_bytes) / 2 ** 20
    except Exception:  # noqa: BLE001 - not every backend reports it
        pass
    results = [np.asarray(loss)] + [np.asarray(grads[n]) for n in model.wrt]
    return (lambda: jax.block_until_ready(compiled(params, rest))), results, {
        "build_s": build_s, "peak_mb": peak}


def available(contender):
    """None when the contender can run here, else why not."""
    try:
        if contender in ("eager", "compile"):
            import torch  # noqa: F401
        if contender == "jax":
            import jax  # noqa: F401
    except ImportError as e:
        return f"not installed ({e.name})"
    return None


def schedule_lines(f):
    """``{stage name: [how it runs, ...]}`` from a compiled function's schedule (the first
    line under each stage's header: the gemm kernel or its loops), one entry per stage of
    that name in the schedule's order (names repeat: every conv2d stage is ``conv2d``)."""
    out, names, fused = {}, [], False
    for line in str(f.schedule).splitlines():
        if line.startswith(("stage ", "stages ")):
            header = line.split(" ", 1)[1].split(" (")[0]
            names = [n.strip() for n in header.split(",")]
            fused = " (fused)" in line
        elif names and line.startswith("  "):
            how = line.strip()
            if len(how) > 70:
                how = how[:67] + "..."
            for n in names:
                out.setdefault(n, []).append(("fused: " if fused else "") + how)
            names = []
    return out


def stage_view(model, f, arrays, top=12):
    """tegrad's costliest stages (their own flops: ``tg.cost`` of the program up to the
    stage in topological order, less that up to the stage before) with how each runs, and PyTorch eager's costliest
    operators (profiler, self CPU time of 5 steps)."""
    _, outputs, _ = model.program()
    how = schedule_lines(f)
    order = tg.topological_order(outputs)
    rows, total, done = [], tg.cost(outputs).flops, 0     # (placeholders cost nothing)
    for i, t in enumerate(order):
        # a prefix of a topological order holds everything it needs: its cost less the
        # shorter prefix's is the stage's own
        upto = tg.cost(order[:i + 1]).flops
        own, done = upto - done, upto
        if own:
            runs = how.get(t.name) or [""]
            rows.append((t.name, "x".join(map(str, t.shape)) or "scalar", own,
                         f"{100 * own / total:.1f}", runs.pop(0) if len(runs) > 1 else runs[0]))
    rows.sort(key=lambda r: -r[2])
    lines = [f"### {model.title}\n",
             f"tegrad: the {top} stages of most flops (of {total} in all)\n",
             _table(["stage", "shape", "flops", "% of flops", "runs as"], rows[:top])]
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        make, step = torch_step(model, model.torch)
        t = make(arrays)
        for _ in range(3):
            step(t)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                step(t)
        lines += ["", "PyTorch eager: operators by self CPU time (5 steps)\n", "```",
                  prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top),
                  "```"]
        del torch
    except ImportError:
        pass
    return "\n".join(lines)


def profile_view(model, arrays, threads, calls):
    """``f.profile()`` of tegrad's step built with ``profile=True``, after ``calls`` calls
    (3 calls before them are not counted: the first runs page faults and cold caches)."""
    placeholders, outputs, _ = model.program()
    f = tg.build(placeholders, outputs, threads=threads, profile=True)
    args = model.tegrad_args(arrays)
    for _ in range(3):
        f(*args)
    f.profile().reset()
    for _ in range(calls):
        f(*args)
    return (f"### {model.title}, {threads} thread(s): tegrad's f.profile() of {calls} "
            f"steps\n\n```\n{f.profile()}\n```")


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def measure_model(model, threads, repeats, contenders, stages=False, memory=True,
                  profile=False):
    """One row of the table: per contender median/min seconds, build seconds, peak MB and
    the difference from PyTorch's float64 results."""
    from peers import alternate
    rng = np.random.default_rng(0)
    arrays = model.arrays(rng)
    reference = torch_reference(model, arrays)
    calls, info, skipped = {}, {}, {}
    for name in contenders:
        why = available(name)
        if why:
            skipped[name] = why
            continue
        print(f"  {model.name}, {threads} thread(s): preparing {name}", file=sys.stderr,
              flush=True)
        try:
            if name == "tegrad":
                call, results, extra = tegrad_contender(model, arrays, threads, memory)
            elif name in ("eager", "compile"):
                call, results, extra = torch_contender(model, arrays, name == "compile")
            else:
                call, results, extra = jax_contender(model, arrays)
        except Exception as e:  # noqa: BLE001 - a contender failing is reported, not fatal
            skipped[name] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            continue
        extra["difference"] = max_difference(reference, results)
        calls[name], info[name] = call, extra
    times = alternate(calls, repeats)
    row = {"model": model.name, "title": model.title, "threads": threads, "skipped": skipped,
           "contenders": {}}
    for name in calls:
        ts = times[name]
        row["contenders"][name] = {
            "median_ms": float(np.median(ts) * 1e3), "min_ms": float(min(ts) * 1e3),
            **{k: v for k, v in info[name].items() if k != "function"}}
    if stages and "tegrad" in info:
        row["stages"] = stage_view(model, info["tegrad"]["function"], arrays)
    if profile and "tegrad" in info:
        row["profile"] = profile_view(model, arrays, threads, max(repeats, 10))
    return row


# -- the character language model -----------------------------------------------------------


def corpus():
    """This repository's Markdown files, as character ids of a 96-symbol vocabulary (the
    95 printable ASCII characters and the newline; anything else is a space)."""
    root = os.path.dirname(HERE)
    names = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        names += sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))
    text = "".join(open(n, encoding="utf-8").read() for n in names)
    codes = np.frombuffer(text.encode("ascii", "replace"), np.uint8).astype(np.int64)
    out = np.where((codes >= 32) & (codes < 127), codes - 32, 0)
    return np.where(codes == 10, 95, out)


class NumpyAdam:
    """``torch.optim.Adam``'s update (default betas and eps), in numpy, in place."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= (self.lr / c1) * m / (np.sqrt(v) / math.sqrt(c2) + self.eps)


def char_lm(threads, steps, lr=3e-3, block=10, sizes=None):
    """Train the transformer block as a character model with tegrad (numpy Adam) and
    PyTorch (``torch.optim.Adam``) from equal weights on equal batches, alternating blocks
    of ``block`` steps (each loop keeps its own state). Returns the losses and the step
    times (the first step of each block, after the switch, is not counted)."""
    import torch
    from peers import wait_until_quiet
    model = transformer(**(sizes or {}))
    batch, seq = model.inputs[0].shape
    text = corpus()
    rng = np.random.default_rng(0)
    init = model.arrays(rng)
    starts = rng.integers(0, len(text) - seq - 1, (steps, batch))

    def batch_at(s):
        window = text[starts[s][:, None] + np.arange(seq + 1)]
        return window[:, :-1], window[:, 1:]

    placeholders, outputs, _ = model.program()
    f = tg.build(placeholders, outputs, threads=threads)
    names = [i.name for i in model.inputs]
    tg_params = [init[n].copy() for n in model.wrt]
    adam = NumpyAdam(tg_params, lr=lr)

    def tegrad_step(s):
        x, y = batch_at(s)
        feed = dict(zip(model.wrt, tg_params), ids=x.astype(np.int32), targets=y.astype(np.int32))
        loss, *grads = f(*[feed[n] for n in names])
        adam.step(grads)
        return float(loss)

    # the same loop as one compiled call: forward, backward and Adam, updates in place
    ph = dict(zip(names, placeholders))
    batch_names = [n for n in names if n not in model.wrt]
    step = tg.train_step(outputs[0], [ph[n] for n in model.wrt], inputs=[ph[n] for n in batch_names],
                         optimizer=tg.optim.adam(lr), threads=threads,
                         init={n: init[n] for n in model.wrt})

    def train_step_(s):
        x, y = batch_at(s)
        feed = {"ids": x.astype(np.int32), "targets": y.astype(np.int32)}
        return step(*[feed[n] for n in batch_names])

    pt = {n: torch.from_numpy(init[n].copy()).requires_grad_(True) for n in model.wrt}
    opt = torch.optim.Adam(list(pt.values()), lr=lr)

    def torch_step_(s):
        x, y = batch_at(s)
        opt.zero_grad()
        loss = model.torch({**pt, "ids": torch.from_numpy(x), "targets": torch.from_numpy(y)})
        loss.backward()
        opt.step()
        return loss.item()

    runs = {"tegrad": (tegrad_step, [], []), "tegrad train_step": (train_step_, [], []),
            "torch": (torch_step_, [], [])}
    for first in range(0, steps, block):
        for name, (fn, losses, times) in runs.items():
            wait_until_quiet()
            for s in range(first, min(first + block, steps)):
                start = time.perf_counter()
                losses.append(fn(s))
                if s > first:
                    times.append(time.perf_counter() - start)
    return {name: {"losses": losses, "median_ms": float(np.median(times) * 1e3),
                   "min_ms": float(min(times) * 1e3)} for name, (_, losses, times) in runs.items()}


# -- the command line ------------------------------------------------------------------------

ALL_CONTENDERS = ("tegrad", "eager", "compile", "jax")


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="lenet,resnet,transformer,gru,tcn,charlm",
                   help="comma-separated: " + ", ".join([*MODELS, "charlm"]))
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--repeats", type=int, default=30, help="timed calls per contender")
    p.add_argument("--quick", action="store_true",
                   help="5 timed calls and 40 char-LM steps (checks the harness)")
    p.add_argument("--contenders", default=",".join(ALL_CONTENDERS),
                   help="comma-separated: " + ", ".join(ALL_CONTENDERS))
    p.add_argument("--steps", type=int, default=300, help="char-LM training steps")
    p.add_argument("--stages", action="store_true",
                   help="print tegrad's schedule and costliest stages and PyTorch's "
                        "costliest operators per model")
    p.add_argument("--profile", action="store_true",
                   help="print f.profile() of tegrad's step (built with profile=True) "
                        "per model")
    p.add_argument("--no-memory", action="store_true",
                   help="skip tegrad's memory measurement (a second, traced build)")
    p.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 5)
        args.steps = min(args.steps, 40)
    return args


def child_env(threads):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    if threads < (os.cpu_count() or 1):
        flags = env.get("XLA_FLAGS", "")
        env["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false "
                            f"intra_op_parallelism_threads={threads}").strip()
    return env


def run_child(args):
    """Measure every model at ``args.child`` threads; print one JSON document."""
    import torch
    torch.set_num_threads(args.child)
    sys.path.insert(0, HERE)
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name == "charlm":
            print(f"  charlm, {args.child} thread(s): training", file=sys.stderr, flush=True)
            rows.append({"model": "charlm", "threads": args.child,
                         "charlm": char_lm(args.child, args.steps)})
            continue
        rows.append(measure_model(MODELS[name](), args.child, args.repeats, contenders,
                                  args.stages, not args.no_memory, args.profile))
    print("JSON:" + json.dumps(rows))


def _cell(c):
    return f"{c['median_ms']:.2f} / {c['min_ms']:.2f}" if c else ""


def _ratio(c, base):
    return f"{c['median_ms'] / base['median_ms']:.2f}" if c and base else ""


def report(rows, contenders):
    out = []
    header = ["model", "threads", "tegrad ms", "PyTorch eager ms", "tegrad / eager",
              "torch.compile ms", "tegrad / compile", "JAX ms", "tegrad / JAX",
              "tegrad build s (differentiate + build)", "compile s (torch.compile / JAX)",
              "peak MB (tegrad / eager / compile / JAX)", "max difference from float64"]
    table, notes, curves, stages, profiles = [], [], [], [], []
    for row in rows:
        if row["model"] == "charlm":
            lm = row["charlm"]
            t, ts, e = lm["tegrad"], lm["tegrad train_step"], lm["torch"]
            table.append([f"char-LM training step (numpy Adam), {len(t['losses'])} steps",
                          row["threads"], _cell(t), _cell(e), _ratio(t, e), "", "", "", "",
                          "", "", "", ""])
            table.append([f"char-LM tg.train_step (Adam in the step), {len(ts['losses'])} "
                          f"steps", row["threads"], _cell(ts), _cell(e), _ratio(ts, e), "", "",
                          "", "", "", "", "", ""])
            every = max(1, len(t["losses"]) // 12)
            steps = list(range(0, len(t["losses"]), every)) + [len(t["losses"]) - 1]
            pts = [(s, f"{t['losses'][s]:.4f}", f"{ts['losses'][s]:.4f}", f"{e['losses'][s]:.4f}")
                   for s in steps]
            curves.append(f"\n## char-LM loss, {row['threads']} thread(s)\n\n"
                          + _table(["step", "tegrad (numpy Adam)", "tegrad train_step (Adam)",
                                    "PyTorch (torch.optim.Adam)"], pts))
            continue
        c = row["contenders"]
        tgc, eager, comp, jx = (c.get(n) for n in ALL_CONTENDERS)
        diffs = ", ".join(f"{n} {v['difference']:.1e}" for n, v in c.items())
        bad = [n for n, v in c.items() if not v["difference"] <= TOLERANCE]
        if bad:
            diffs += " MISMATCH: " + ", ".join(bad)
        peaks = " / ".join("" if not v or v.get("peak_mb") is None else f"{v['peak_mb']:.1f}"
                           for v in (tgc, eager, comp, jx))
        build = (f"{tgc['differentiate_s'] + tgc['build_s']:.2f} "
                 f"({tgc['differentiate_s']:.2f} + {tgc['build_s']:.2f})" if tgc else "")
        compile_s = " / ".join(f"{v['build_s']:.1f}" if v else "" for v in (comp, jx))
        table.append([row["title"], row["threads"], _cell(tgc), _cell(eager),
                      _ratio(tgc, eager), _cell(comp), _ratio(tgc, comp), _cell(jx),
                      _ratio(tgc, jx), build, compile_s, peaks, diffs])
        for n, why in row["skipped"].items():
            notes.append(f"- {row['model']}, {row['threads']} thread(s): {n} skipped: {why}")
        if row.get("stages"):
            stages.append(row["stages"])
        if row.get("profile"):
            profiles.append(row["profile"])
    out.append(_table(header, table))
    if notes:
        out.append("\n" + "\n".join(sorted(set(notes))))
    out += curves
    if stages:
        out.append("\n## per-stage view\n")
        out += stages
    if profiles:
        out.append("\n## tegrad's profile per step\n")
        out += profiles
    return "\n".join(out)


def main(argv=None):
    args = _parse_args(argv)
    if args.child:
        return run_child(args)
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    import platform
    versions = [f"numpy {np.__version__}"]
    for mod in ("torch", "jax"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            versions.append(f"{mod} not installed")
    print(f"# models: one training step (loss + every gradient), float32\n\n"
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{', '.join(versions)}; median / min ms of {args.repeats} alternated calls\n")
    rows = []
    for n in threads:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(n),
               "--models", args.models, "--repeats", str(args.repeats),
               "--contenders", args.contenders, "--steps", str(args.steps)]
        if args.stages:
            cmd.append("--stages")
        if args.no_memory:
            cmd.append("--no-memory")
        if args.profile:
            cmd.append("--profile")
        done = subprocess.run(cmd, env=child_env(n), stdout=subprocess.PIPE, text=True)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("JSON:")]
        if done.returncode or not lines:
            print(f"the run at {n} thread(s) failed (exit {done.returncode})")
            continue
        rows += json.loads(lines[-1][5:])
    print(report(rows, args.contenders))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
