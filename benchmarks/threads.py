"""Where a parallel loop starts to pay: one thread against N on growing loops.

    python benchmarks/threads.py [--threads 2] [--repeats 400] [--peers | --contractions]

For an elementwise loop (``B[i] = A[i] * 2 + 1``, float32) and row sums of an ``n x 64``
matrix, of growing sizes, the kernel's time with its loop serial and with it parallel
(``parallelize_stages(..., min_work=0)``), measured alternately in one process (median
and minimum in microseconds), and the loop's work as
:func:`tegrad.codegen.schedule.parallel.loop_work` counts it. The smallest work where
the parallel kernel is faster is what ``MIN_PARALLEL_WORK`` is set from.

With ``--peers``, the non-contraction cases of ``benchmarks/peers.py`` (pooling, softmax
cross-entropy, l2_normalize, the MLP step, conv -> dense) built by ``tg.build`` with one
thread and with N, called alternately as ``peers.alternate`` does (each timed call after
a warm-up of its own): the speed-up threads give, without PyTorch's own threads
competing for the cores. With ``--contractions``, the same for the cases that
run on the gemm kernel (dense, the three conv2d steps).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

import tegrad as tg
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.runtime.executable import Executable
from tegrad.codegen.schedule.parallel import MIN_PARALLEL_WORK, loop_work, parallelize_stages


def elementwise(n):
    a = tg.placeholder((n,), dtype="float32", name="a")
    return [a], [tg.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="b")]


def row_sums(n):
    a = tg.placeholder((n, 64), dtype="float32", name="a")
    k = tg.reduce_axis((0, 64), name="k")
    return [a], [tg.compute((n,), lambda i: tg.sum(a[i, k], axis=k), name="s")]


def measure(program, n, threads, repeats):
    inputs, outputs = program(n)
    kernel = lower_program(inputs, outputs)
    serial = Executable(kernel, threads=1)
    parallel = Executable(parallelize_stages(kernel, threads=threads, min_work=0), threads=threads)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(t.shape).astype(t.dtype) for t in inputs]
    args += [np.empty(t.shape, t.dtype) for t in outputs]
    times = {"serial": [], "parallel": []}
    for round_ in range(repeats + 10):
        for name, exe in (("serial", serial), ("parallel", parallel)):
            start = time.perf_counter()
            exe.run(args)
            elapsed = time.perf_counter() - start
            if round_ >= 10:
                times[name].append(elapsed)
    body = kernel.body
    return loop_work(body), times


#: the cases of benchmarks/peers.py that are not contractions
PEER_CASES = ("max_pool 2x2 8x64", "avg_pool", "softmax cross", "l2_normalize", "MLP",
              "conv 32x3")

#: the cases of benchmarks/peers.py that run on the gemm kernel
CONTRACTION_CASES = ("dense", "conv2d")


def peer_rows(threads, repeats, names=PEER_CASES):
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import peers
    rng = np.random.default_rng(0)
    for case in peers.all_cases():
        if not any(name in case.name for name in names):
            continue
        arrays = case.inputs(rng)
        placeholders, outputs = case.program()
        fns = {t: tg.build(placeholders, outputs, threads=t) for t in (1, threads)}
        parallel = sum(s.count("parallel for") for s in [fns[threads].loops])
        assert all(a.tobytes() == b.tobytes()
                   for a, b in zip(fns[1](*arrays), fns[threads](*arrays))), case.name
        times = peers.alternate({t: (lambda f=f: f(*arrays)) for t, f in fns.items()}, repeats)
        one, many = np.array(times[1]) * 1e3, np.array(times[threads]) * 1e3
        yield (f"| {case.name} | {parallel} | {np.median(one):.3f} / {one.min():.3f} | "
               f"{np.median(many):.3f} / {many.min():.3f} | "
               f"{np.median(one) / np.median(many):.2f} / {one.min() / many.min():.2f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=400)
    p.add_argument("--peers", action="store_true", help="the peers.py cases instead")
    p.add_argument("--contractions", action="store_true",
                   help="the peers.py cases on the gemm kernel instead")
    args = p.parse_args()
    if args.peers or args.contractions:
        print(f"tg.build with 1 and {args.threads} threads, alternated; ms, median / min\n")
        print(f"| case | parallel loops | 1 thread | {args.threads} threads | "
              f"speed-up (median / min) |")
        print("|---|---|---|---|---|")
        names = CONTRACTION_CASES if args.contractions else PEER_CASES
        for row in peer_rows(args.threads, args.repeats, names):
            print(row, flush=True)
        return
    print(f"MIN_PARALLEL_WORK = {MIN_PARALLEL_WORK}; {args.threads} threads; "
          f"times in us, median / min\n")
    print("| loop | n | work | serial | parallel | speed-up (median) |")
    print("|---|---|---|---|---|---|")
    cases = [("elementwise", elementwise, [1 << k for k in range(10, 21)]),
             ("row sums", row_sums, [1 << k for k in range(4, 14)])]
    for name, program, sizes in cases:
        for n in sizes:
            work, times = measure(program, n, args.threads, args.repeats)
            s, q = np.array(times["serial"]) * 1e6, np.array(times["parallel"]) * 1e6
            print(f"| {name} | {n} | {work} | {np.median(s):.2f} / {s.min():.2f} | "
                  f"{np.median(q):.2f} / {q.min():.2f} | {np.median(s) / np.median(q):.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
