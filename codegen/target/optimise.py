"""LLVM's optimisation pipeline: the one every module of this package goes through (the
JIT's generated kernels and hand-written kernel modules, exported libraries).

It is the new pass manager's ``O<speed_level>`` pipeline with loop and SLP vectorisation
on, tuned for a target machine (its cost model picks the vector widths). The one
setting that differs between callers is LLVM's loop unroller, an explicit argument:

- **off** for generated kernels (:class:`~tegrad.codegen.target.jit.LoadedModule`): the
  unroller fully unrolls every small constant-trip loop, 3-5x the compile time and code
  size; the loops a schedule wants unrolled are marked ``unrolled`` and unrolled when
  emitted;
- **on** for the hand-written kernel modules (the thread pool, the gemm's micro-kernels
  and packing routines, the dot kernel: few loops, compiled once per process) and for
  exported libraries (compiled once, ahead of time).

>>> import llvmlite.binding as llvm
>>> from tegrad.codegen.target.machine import Target
>>> m = llvm.parse_assembly("define i32 @f(i32 %x) {\\n  %y = add i32 %x, 0\\n  ret i32 %y\\n}")
>>> optimise(m, Target.host().target_machine(), unroll=False)
>>> "add i32" in str(m)  # x + 0 folded away
False
"""
from __future__ import annotations

import llvmlite.binding as llvm


def optimise(module_ref, machine, *, unroll, speed_level=3):
    """Run the ``O<speed_level>`` pipeline, loop and SLP vectorisation on and LLVM's loop
    unroller on or off (``unroll``: see the module docstring), over the binding module
    ``module_ref`` in place, tuned for the target machine ``machine``."""
    options = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = unroll
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module_ref, builder)


__all__ = ["optimise"]
