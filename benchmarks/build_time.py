"""Build time at model scale: differentiate + ``tg.build`` of an L-layer pre-LN transformer's
training step (the block of ``benchmarks/models.py``, stacked: B8 T64 d128, 4 heads,
causal, GELU MLP 512, vocabulary 96, float32), in a process with an empty on-disk cache,
then in a second process that finds the first's machine code alone (the cache of built
programs off: ``TEGRAD_PROGRAM_CACHE=0``), then in a third that finds the built program
too (as a training script's second run does: its loops, schedule and machine code); and
in a process whose cache holds only what another program left there (the same step at
batch 4: a new program on a machine that built one before, which finds the product
kernels' shared routines compiled).

Prints a markdown table: per depth, the seconds (wall and this process's CPU) to
differentiate and to build, cold, with the machine code cached, with the program cached,
and after another program.

    python benchmarks/build_time.py [--layers 1,2,4,8] [--threads 1]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import tegrad as tg
from tegrad import nn

B, T, D, HEADS, MLP, VOCAB = 8, 64, 128, 4, 512, 96


def program(layers, batch=B):
    """``(placeholders, params, loss)`` of the L-layer transformer's loss."""
    ids = tg.placeholder((batch, T), dtype="int32", name="ids")
    targets = tg.placeholder((batch, T), dtype="int32", name="targets")
    params = {"tok": (VOCAB, D), "pos": (T, D), "lnf_g": (D,), "lnf_b": (D,),
              "w_out": (VOCAB, D), "b_out": (VOCAB,)}
    for k in range(layers):
        for name, shape in (("ln1_g", (D,)), ("ln1_b", (D,)), ("w_q", (D, D)), ("b_q", (D,)),
                            ("w_k", (D, D)), ("b_k", (D,)), ("w_v", (D, D)), ("b_v", (D,)),
                            ("w_o", (D, D)), ("b_o", (D,)), ("ln2_g", (D,)), ("ln2_b", (D,)),
                            ("w1", (MLP, D)), ("b1", (MLP,)), ("w2", (D, MLP)), ("b2", (D,))):
            params[f"{name}_{k}"] = shape
    p = {n: tg.placeholder(s, name=n) for n, s in params.items()}
    h = nn.embedding(p["tok"], ids) + p["pos"]
    for k in range(layers):
        a = nn.layer_norm(h, p[f"ln1_g_{k}"], p[f"ln1_b_{k}"])
        h = h + nn.multi_head_attention(a, a, a, p[f"w_q_{k}"], p[f"w_k_{k}"], p[f"w_v_{k}"],
                                        p[f"w_o_{k}"], num_heads=HEADS, b_q=p[f"b_q_{k}"],
                                        b_k=p[f"b_k_{k}"], b_v=p[f"b_v_{k}"],
                                        b_o=p[f"b_o_{k}"], causal=True)
        m = nn.gelu(nn.dense(nn.layer_norm(h, p[f"ln2_g_{k}"], p[f"ln2_b_{k}"]),
                             p[f"w1_{k}"], p[f"b1_{k}"]))
        h = h + nn.dense(m, p[f"w2_{k}"], p[f"b2_{k}"])
    logits = nn.dense(nn.layer_norm(h, p["lnf_g"], p["lnf_b"]), p["w_out"], p["b_out"])
    loss = nn.softmax_cross_entropy(logits.reshape(batch * T, VOCAB),
                                    targets.reshape(batch * T))
    return [ids, targets, *p.values()], list(p.values()), loss


def measure(layers, threads, batch=B):
    """``{phase: (wall s, CPU s)}`` of differentiating and building the L-layer step in
    this process."""
    out = {}
    wall, cpu = time.perf_counter(), time.process_time()
    placeholders, params, loss = program(layers, batch)
    grads = tg.differentiate(loss, params)
    out["differentiate"] = (time.perf_counter() - wall, time.process_time() - cpu)
    wall, cpu = time.perf_counter(), time.process_time()
    tg.build(placeholders, [loss, *grads], threads=threads)
    out["build"] = (time.perf_counter() - wall, time.process_time() - cpu)
    return out


def _child(layers, threads, batch):
    print("JSON:" + json.dumps(measure(layers, threads, batch)))


def _in_process(layers, threads, cache, programs=True, batch=B):
    """``measure`` in a new process whose on-disk cache is ``cache`` (``programs``: built
    programs cached too, else machine code alone), at ``batch``."""
    env = dict(os.environ, TEGRAD_CACHE_DIR=cache, TEGRAD_CACHE="1",
               TEGRAD_PROGRAM_CACHE="1" if programs else "0")
    run = subprocess.run([sys.executable, __file__, "--child", str(layers),
                          "--threads", str(threads), "--batch", str(batch)], env=env,
                         capture_output=True, text=True, check=True)
    line = [x for x in run.stdout.splitlines() if x.startswith("JSON:")][-1]
    return json.loads(line[5:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default="1,2,4,8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=B, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        return _child(args.child, args.threads, args.batch)
    rows = []
    for layers in [int(x) for x in args.layers.split(",")]:
        with tempfile.TemporaryDirectory(prefix="tegrad-build-time-") as cache:
            cold = _in_process(layers, args.threads, cache)
            objects = _in_process(layers, args.threads, cache, programs=False)
            warm = _in_process(layers, args.threads, cache)
        with tempfile.TemporaryDirectory(prefix="tegrad-build-time-") as cache:
            _in_process(layers, args.threads, cache, batch=4)
            after = _in_process(layers, args.threads, cache)
        cells = [f"{cold['differentiate'][0]:.2f} / {cold['differentiate'][1]:.2f}",
                 f"{cold['build'][0]:.2f} / {cold['build'][1]:.2f}",
                 f"{objects['build'][0]:.2f} / {objects['build'][1]:.2f}",
                 f"{warm['differentiate'][0]:.2f} / {warm['differentiate'][1]:.2f}",
                 f"{warm['build'][0]:.2f} / {warm['build'][1]:.2f}",
                 f"{after['differentiate'][0]:.2f} / {after['differentiate'][1]:.2f}",
                 f"{after['build'][0]:.2f} / {after['build'][1]:.2f}"]
        rows.append([str(layers), *cells])
        print(f"  {layers} layer(s) done", file=sys.stderr, flush=True)
    header = ["layers", "differentiate s (wall / CPU)", "build s, empty cache",
              "build s, machine code cached", "differentiate s, third process",
              "build s, program cached", "differentiate s, after another program",
              "build s, after another program"]
    print(f"\n# differentiate + build of the L-layer transformer step, {args.threads} "
          f"thread(s); wall / CPU seconds\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
