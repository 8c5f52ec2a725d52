"""The Python overhead of a compiled call and the compile time, phase by phase.

Call overhead: a compiled function of six float32 arguments (four elements each, so the
kernel itself takes a few nanoseconds) called with fresh outputs and with ``out=``; the
time of one call (argument checks included), best and median over repeats, against the
target of 10 us.

Compile time, for the 6-layer CNN training step of benchmarks/zero_elimination.py (all
three weight gradients) and for one conv layer (8x32x32x32 -> 64, 3x3, padding 1, its
output and the gradients of its input and weight), split into: differentiate (reverse
mode, naive adjoints), zero elimination, lowering to loops, LLVM IR emission, LLVM
optimisation (O3) and machine-code generation; against the targets of 3 s and 0.5 s for
differentiate + zero elimination + build. Each phase is timed on its own, best of a few
runs (the machine is shared: read the minima).

    python benchmarks/overheads.py [--repeats N]
"""
import argparse
import statistics
import time
import timeit

import llvmlite.binding as llvm
import numpy as np

import tegrad as tg
from tegrad import nn
from tegrad.codegen.llvm.emit import emit_kernel
from tegrad.codegen.target.jit import data_layout, host_triple, new_target_machine, optimise_for_jit
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.runtime import clear_cache
from tegrad.codegen.runtime.executable import python_abi
from zero_elimination import cnn_program  # the CNN the other benchmarks measure

CALL_TARGET_US = 10.0


def six_argument_function():
    inputs = [tg.placeholder((4,), name=f"a{k}") for k in range(6)]
    y = tg.compute((4,), lambda i: inputs[0][i] * inputs[1][i] + inputs[2][i] * inputs[3][i]
                   + inputs[4][i] * inputs[5][i], name="y")
    return tg.build(inputs, [y])


def call_overhead(repeats):
    """Best and median microseconds per call, without and with ``out=``."""
    f = six_argument_function()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(4).astype(np.float32) for _ in range(6)]
    out = [np.empty(4, np.float32)]
    np.testing.assert_allclose(f(*args)[0], f(*args, out=out)[0])
    number = 20000
    rows = []
    for label, call in [("f(*six)", lambda: f(*args)),
                        ("f(*six, out=[y])", lambda: f(*args, out=out))]:
        times = [t / number * 1e6 for t in timeit.repeat(call, number=number, repeat=repeats)]
        rows.append((label, min(times), statistics.median(times)))
    return rows


def conv_layer_program():
    x = tg.placeholder((8, 32, 32, 32), name="x")
    w = tg.placeholder((64, 32, 3, 3), name="w")
    y = nn.conv2d(x, w, padding=1)
    head = tg.placeholder(y.shape, name="head")
    return [x, w, head], y, [x, w], head


def cnn_step_program():
    inputs, loss, weights = cnn_program()
    return inputs, loss, weights, None


def _best(repeats, fn):
    """``((first, best) seconds, value)`` of ``repeats`` runs of ``fn``."""
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return (times[0], min(times)), value


def compile_phases(program, repeats):
    """``{phase: (first, best) seconds}`` of compiling ``program()`` (see the module
    docstring; the first run of a phase may fill caches the next ones use)."""
    inputs, out, wrt, head = program()
    phases = {}
    phases["differentiate"], naive = _best(
        repeats, lambda: tg.differentiate(out, wrt, head=head, optimize=False))
    phases["zero elimination"], res = _best(repeats, naive.optimized)
    outputs = [out] + list(res)
    if head is not None:
        inputs = [t for t in inputs if t is not head] + [head]
    phases["lowering"], kernel = _best(repeats, lambda: lower_program(inputs, outputs,
                                                                      name="step"))
    abi = python_abi()
    phases["LLVM emission"], text = _best(repeats, lambda: str(emit_kernel(
        kernel, triple=host_triple(), data_layout=data_layout(), python_abi=abi).module))

    def optimised():
        module = llvm.parse_assembly(text)
        module.verify()
        optimise_for_jit(module)
        return module

    phases["LLVM optimisation"], module = _best(repeats, optimised)
    optimised_text = str(module)

    def machine_code():
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(optimised_text),
                                            new_target_machine())
        engine.finalize_object()
        return engine

    phases["machine code"], _ = _best(repeats, machine_code)

    def build():
        clear_cache()
        return tg.build(inputs, outputs)

    phases["tg.build (all of the above after zero elimination)"], _ = _best(repeats, build)
    return phases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| call | best us | median us |")
    print("| --- | ---: | ---: |")
    for label, best, median in call_overhead(max(args.repeats, 5)):
        flag = "" if best < CALL_TARGET_US else f" (target {CALL_TARGET_US:g})"
        print(f"| {label} | {best:.2f}{flag} | {median:.2f} |")
    for name, program, target in [("6-layer CNN step", cnn_step_program, 3.0),
                                  ("conv layer 8x32x32x32->64 fwd+grads", conv_layer_program,
                                   0.5)]:
        phases = compile_phases(program, args.repeats)
        print(f"\n{name}: compile phases in seconds, first run and best of {args.repeats}")
        print("| phase | first s | best s |")
        print("| --- | ---: | ---: |")
        for phase, (first, best) in phases.items():
            print(f"| {phase} | {first:.3f} | {best:.3f} |")
        summed = ["differentiate", "zero elimination", "lowering", "LLVM emission",
                  "LLVM optimisation", "machine code"]
        first, best = (sum(phases[p][k] for p in summed) for k in (0, 1))
        print(f"| differentiate + zero elimination + build (sum of phases; target "
              f"{target:g}) | {first:.3f} | {best:.3f} |")


if __name__ == "__main__":
    main()
