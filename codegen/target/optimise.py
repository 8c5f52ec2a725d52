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

import contextlib
import os
import re
import sys
import tempfile
import threading

import llvmlite.binding as llvm

from tegrad.codegen.target.unlocked import unlocked

#: the diagnostics LLVM prints on stderr for a loop marked ``llvm.loop.vectorize.enable``
#: that it leaves scalar: the marks are checked in the optimised IR instead
#: (:mod:`tegrad.codegen.llvm.vector_marks`: a declined request raises, a declined
#: automatic mark prints as a plain loop), so these lines are not the user's to read.
#: Optimisations running at once (:mod:`.concurrent`) write them in pieces that
#: interleave within lines: a line holding the note, or only the pieces of its prefix,
#: is one of them
_DECLINED_VECTORIZATION = re.compile(
    r"loop not vectorized|^\s*(remark|warning)(remark|warning|: |<unknown>:0:0|\s)*$")


def optimise(module_ref, machine, *, unroll, speed_level=3, concurrent=False):
    """Run the ``O<speed_level>`` pipeline, loop and SLP vectorisation on and LLVM's loop
    unroller on or off (``unroll``: see the module docstring), over the binding module
    ``module_ref`` in place, tuned for the target machine ``machine``. ``concurrent``:
    the module belongs to an LLVM context and the machine to a thread no other thread
    uses, and the pipeline runs without llvmlite's lock, beside other such runs
    (:mod:`.concurrent`)."""
    options = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = unroll
    builder = llvm.create_pass_builder(machine, options)
    manager = builder.getModulePassManager()
    with _declined_vectorization_dropped():
        if concurrent:
            unlocked("LLVMPY_RunNewModulePassManager")(manager, module_ref, builder)
        else:
            manager.run(module_ref, builder)


#: file descriptor 2's redirection, shared by the optimisations running at once (the
#: JIT's background thread and concurrent compiles optimise too): ``runs`` of them,
#: the saved descriptor and the temporary file; the first run redirects, the last one
#: restores
_redirection = {"runs": 0, "saved": None, "file": None}
_redirection_lock = threading.Lock()


@contextlib.contextmanager
def _declined_vectorization_dropped():
    """Run the body with file descriptor 2 sent to a temporary file, then pass on to
    stderr every line written there but LLVM's notes on declined vectorisation (llvmlite
    has no diagnostic handler to take them). Text other threads write meanwhile comes
    out after the last body running at once, not lost."""
    with _redirection_lock:
        if _redirection["runs"] == 0:
            _redirect()
        _redirection["runs"] += 1
    try:
        yield
    finally:
        with _redirection_lock:
            _redirection["runs"] -= 1
            if _redirection["runs"] == 0:
                _restore()


def _redirect():
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to keep clean
        return
    captured = tempfile.TemporaryFile()
    os.dup2(captured.fileno(), 2)
    _redirection.update(saved=saved, file=captured)


def _restore():
    saved, captured = _redirection["saved"], _redirection["file"]
    if saved is None:
        return
    _redirection.update(saved=None, file=None)
    with captured:
        os.dup2(saved, 2)
        os.close(saved)
        captured.seek(0)
        text = captured.read()
    kept = [line for line in text.decode(errors="replace").splitlines(keepends=True)
            if not _DECLINED_VECTORIZATION.search(line)]
    if kept:
        os.write(2, "".join(kept).encode())


__all__ = ["optimise"]
