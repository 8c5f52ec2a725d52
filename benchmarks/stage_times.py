"""Where a model's training step spends its time: each stage compiled and timed alone.

Every stage of a model of ``benchmarks/models.py`` (its loss and gradients) is rebuilt to
read placeholders in place of the stages it reads, compiled alone with ``tg.build`` and
timed on the values the whole step computes; the table lists the stages by time with
their flops (``tg.cost``) and GFLOP/s, and the sum of the stages against the whole step.
A stage alone cannot be fused with its neighbours, so the sum is an upper bound of what
the step's stages cost together; a stage far below the machine's speed on its flops is
where the step loses time::

    python benchmarks/stage_times.py --model resnet --top 15
"""
import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import tegrad as tg  # noqa: E402
from tegrad.ir.rewrite import retarget  # noqa: E402
from tegrad.ir.stages import is_placeholder  # noqa: E402

import models as zoo  # noqa: E402


def _median_seconds(call, repeats):
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), float(min(times))


def stage_times(model, threads=1, repeats=20):
    """``(whole step (median, min) s, [(stage, shape, flops, median s, min s, how it
    runs), ...])`` for ``model`` (a :class:`models.Model`)."""
    placeholders, outputs, _ = model.program()
    arrays = model.arrays(np.random.default_rng(0))
    args = model.tegrad_args(arrays)
    order = [t for t in tg.topological_order(outputs) if not is_placeholder(t)]
    whole = tg.build(placeholders, outputs, threads=threads)
    step = _median_seconds(lambda: whole(*args), repeats)
    values = dict(zip((id(t) for t in order),
                      tg.build(placeholders, order, threads=threads)(*args)))
    values.update((id(p), a) for p, a in zip(placeholders, args))
    rows = []
    for t in order:
        reads = t.op.input_tensors()
        stand_ins = {r: tg.placeholder(r.shape, dtype=r.dtype, name=r.name) for r in reads}
        alone = retarget(t, stand_ins)
        f = tg.build(list(stand_ins.values()), [alone], threads=threads)
        feed = [values[id(r)] for r in reads]
        median, least = _median_seconds(lambda: f(*feed), repeats)
        how = zoo.schedule_lines(f).get(alone.name, [""])[0]
        rows.append((t.name, "x".join(map(str, t.shape)) or "scalar",
                     tg.cost([alone]).flops, median, least, how))
    rows.sort(key=lambda r: -r[3])
    return step, rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet", help="a model of benchmarks/models.py: "
                   "lenet, resnet, transformer, gru, tcn")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args(argv)
    factories = {"lenet": zoo.lenet, "resnet": zoo.resnet_block,
                 "transformer": zoo.transformer, "gru": zoo.gru, "tcn": zoo.tcn}
    model = factories[a.model]()
    (step, step_min), rows = stage_times(model, a.threads, a.repeats)
    total = sum(r[3] for r in rows)
    print(f"{model.title}: whole step {step * 1e3:.2f} ms (min {step_min * 1e3:.2f}); "
          f"{len(rows)} stages alone sum to {total * 1e3:.2f} ms\n")
    print("| stage | shape | flops | median ms | min ms | GFLOP/s | % of sum | runs as |")
    print("|---|---|---|---|---|---|---|---|")
    for name, shape, flops, median, least, how in rows[:a.top]:
        print(f"| {name} | {shape} | {flops} | {median * 1e3:.3f} | {least * 1e3:.3f} | "
              f"{flops / least / 1e9:.1f} | {100 * median / total:.1f} | {how} |")


if __name__ == "__main__":
    main()
