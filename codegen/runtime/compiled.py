"""The function :func:`tegrad.build` returns."""
from __future__ import annotations

import numpy as np

from tegrad.ir.errors import TegradError
from tegrad.codegen.export.program import export_kernel
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.runtime.arguments import ArraySpec, check_count
from tegrad.codegen.schedule.describe import describe_schedule


class CompiledFunction:
    """A tegrad program compiled to native code.

    ``f(*arrays)`` takes one array per input placeholder (in the order given to
    :func:`tegrad.build`) and returns a list with one new numpy array per output (a list
    even for one output); ``f(*arrays, out=[...])`` writes the outputs into the given
    arrays instead and returns them. Arguments and ``out`` arrays are checked (see
    :mod:`tegrad.codegen.runtime.arguments`). Calls from several threads at once are safe.

    ``f.loops`` is the loop nest (pseudo-C), ``f.schedule`` the schedule chosen per stage
    (loop order, splits, vector, unrolled and parallel loops, fused stages), ``f.llvm_ir``
    the optimised LLVM IR,
    ``f.asm`` the machine code; ``f.inputs`` and ``f.outputs`` are the tensors.
    """

    def __init__(self, inputs, outputs, executable, schedule_record=None):
        self._schedule_record = schedule_record
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._executable = executable
        self._in_specs = tuple(ArraySpec(t.name, t.shape, t.dtype) for t in self.inputs)
        self._out_specs = tuple(ArraySpec(t.name, t.shape, t.dtype) for t in self.outputs)
        self._n_in = len(self._in_specs)
        self._empty = [(s.shape, s.dtype) for s in self._out_specs]

    def __call__(self, *arrays, out=None):
        if len(arrays) != self._n_in:
            check_count(self._in_specs, len(arrays))
        args = []
        for spec, a in zip(self._in_specs, arrays):
            # the common case inline: an array of exactly the right kind, used in place
            if type(a) is np.ndarray and a.dtype is spec.dtype and a.shape == spec.shape:
                flags = a.flags
                if flags.c_contiguous and flags.aligned:
                    args.append(a)
                    continue
            args.append(spec.argument(a))
        if out is None:
            outs = [np.empty(shape, dtype) for shape, dtype in self._empty]
        else:
            if not isinstance(out, (list, tuple)):
                raise TegradError(f"out must be a list of {len(self._out_specs)} arrays, got "
                                  f"{type(out).__name__}")
            check_count(self._out_specs, len(out), "outputs")
            # overlaps between the arrays the kernel gets are checked natively
            outs = [spec.out(o) for spec, o in zip(self._out_specs, out)]
        args.extend(outs)
        self._executable.run(args)
        return outs

    @property
    def kernel(self):
        """The loop-IR kernel that was compiled."""
        return self._executable.kernel

    @property
    def loops(self):
        """The loop nests, as readable pseudo-C."""
        return format_kernel(self._executable.kernel)

    @property
    def schedule(self):
        """The schedule of each stage, as readable text (see
        :mod:`tegrad.codegen.schedule.describe`)."""
        return describe_schedule(self._executable.kernel, self._schedule_record)

    @property
    def llvm_ir(self):
        """The optimised LLVM IR."""
        return self._executable.llvm_ir

    @property
    def asm(self):
        """The machine code, as assembly."""
        return self._executable.asm

    def export(self, path, *, target=None, cpu=None, name=None, linker=None):
        """Write this function as ``<path>.o``, ``<path>.h`` and (when a linker for the
        target is found) a shared library: see :func:`tegrad.export`."""
        return export_kernel(self.kernel, path, target=target, cpu=cpu, name=name,
                             linker=linker)

    def __repr__(self):
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<CompiledFunction {self._executable.kernel.name}({ins}) -> [{outs}]>"


__all__ = ["CompiledFunction"]
