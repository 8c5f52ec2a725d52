"""The function :func:`tegrad.build` returns."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from sys import getrefcount

import numpy as np

from tegrad.ir.errors import FeedError, TegradError
from tegrad.reference.memory import BufferTooLargeError, check_buffers_fit
from tegrad.codegen.export.program import export_built
from tegrad.codegen.llvm.vector_marks import unvectorised_loops, vector_marked
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.runtime.arguments import ArraySpec, by_name, check_count
from tegrad.codegen.runtime.profile import profile_of
from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.schedule.describe import schedule_value, without_marks
from tegrad.codegen.schedule.steps import Schedule


def _reference_counts(arrays):
    return [getrefcount(a) for a in arrays]


#: what :func:`_reference_counts` gives for an array referenced only by its tuple (measured,
#: as what the interpreter counts varies between versions)
_UNREFERENCED = _reference_counts((np.empty(0),))[0]


#: how a compiled function pickles: :mod:`tegrad.codegen.runtime.pickling`, which builds
#: functions and so sits above this module, installs ``"reduce"`` (function -> its
#: ``__reduce__`` value) when the package loads
PICKLING = {}


@dataclass(frozen=True)
class MemoryReport:
    """The bytes one call of a compiled function holds: its ``inputs`` and ``outputs``
    (the arrays it is given and returns), ``state`` (arrays a training step updates in
    place: its parameters and optimizer state; 0 for a plain function), its
    ``workspace`` (the storage it owns: temporaries, large local buffers and packing
    space, where buffers whose lifetimes are disjoint share memory), what that workspace
    would take with a place of its own for every buffer (``workspace_unshared``), and
    ``peak``: all of them at once."""

    inputs: int
    outputs: int
    state: int
    workspace: int
    workspace_unshared: int

    @property
    def peak(self):
        return self.inputs + self.outputs + self.state + self.workspace

    def __str__(self):
        mb = lambda n: f"{n / 2**20:.2f} MB"  # noqa: E731
        return (f"inputs {mb(self.inputs)}, outputs {mb(self.outputs)}, state "
                f"{mb(self.state)}, workspace {mb(self.workspace)} (unshared "
                f"{mb(self.workspace_unshared)}), peak {mb(self.peak)}")


def _nbytes(tensors):
    return sum(int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize
               for t in tensors)


def _unvectorised(executable):
    """The loops of ``executable``'s kernel marked ``vectorized`` that LLVM did not
    vectorise in the module it runs now
    (:func:`~tegrad.codegen.llvm.vector_marks.unvectorised_loops`; the optimised IR is
    printed on first use, then kept by the module)."""
    kernel = executable.kernel
    return unvectorised_loops(kernel, executable.llvm_ir) if vector_marked(kernel.body) else []


class CompiledFunction:
    """A tegrad program compiled to native code.

    ``f(*arrays)`` takes one array per input placeholder (in the order given to
    :func:`tegrad.build`; ``f(x=a, w=b)`` names them by their placeholders' names
    instead, or names the ones after those given by position) and returns a list with
    one numpy array per output (a list even for one output); ``f(*arrays, out=[...])`` writes the outputs into the given
    arrays instead and returns them. A returned array is new, or one this function
    returned before that nothing references any more (written over: no allocation, no
    page faults, and its memory likely still in cache). Arguments and ``out`` arrays are
    checked (see :mod:`tegrad.codegen.runtime.arguments`). Calls from several threads at
    once are safe.

    ``f.loops`` is the loop nest (pseudo-C), ``f.schedule`` the schedule chosen per stage
    (loop order, splits, vector, unrolled and parallel loops, fused stages; a loop marked
    ``vectorized`` that LLVM did not vectorise is shown without the mark, read from the
    optimised IR when first printed), ``f.llvm_ir`` the optimised LLVM IR,
    ``f.asm`` the machine code; ``f.inputs`` and ``f.outputs`` are the tensors.
    """

    def __init__(self, inputs, outputs, executable, schedule_record=None, schedule=None,
                 chosen=None):
        self._schedule_record = schedule_record
        self._chosen = chosen  # the Schedule of the steps made (None: described anew)
        # the build's schedule= option, which an export compiles with again (a copy: the
        # caller's dict may change after the build)
        self._schedule = copy.deepcopy(schedule)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._executable = executable
        self._in_specs = tuple(ArraySpec(t.name, t.shape, t.dtype) for t in self.inputs)
        self._out_specs = tuple(ArraySpec(t.name, t.shape, t.dtype) for t in self.outputs)
        self._n_in = len(self._in_specs)
        # the input named "out", which a call can give by position only
        names = [s.name for s in self._in_specs]
        self._out_position = names.index("out") if "out" in names else None
        self._in_kinds = tuple((s.dtype, s.shape) for s in self._in_specs)
        self._empty = [(s.shape, s.dtype) for s in self._out_specs]
        # outputs larger than the machine are refused by the calls that would allocate
        # them (a call given out= arrays that exist needs no more memory)
        try:
            check_buffers_fit([(s.name, s.shape, s.dtype) for s in self._out_specs], "output")
            self._oversized = None
        except BufferTooLargeError as err:
            self._oversized = str(err)
        self._run = executable.run
        #: the kernel on data pointers (ints: the inputs', then the outputs'), unchecked,
        #: for callers that allocate the outputs themselves (tegrad.torch): see
        #: Executable.run_pointers; None when the outputs could not be allocated
        self._run_pointers = executable.run_pointers if self._oversized is None else None
        # the outputs of earlier calls, each set reused once nothing else references it
        self._spares = []
        self._schedule_value = None
        self._check_vectorized()

    def _steps(self):
        if self._chosen is not None:
            return self._chosen.steps
        return self._schedule_record.steps if self._schedule_record else ()

    def _check_vectorized(self):
        """Refuse a ``vectorize`` step of the schedule asked for whose loop LLVM did not
        vectorise (a function checking its accesses vectorises no loop: not refused)."""
        asked = [s for s in self._steps() if s.primitive == "vectorize"]
        if not asked or self._executable.check_bounds:
            return
        declined = {u.loop.var.name: u for u in _unvectorised(self._executable)}
        for step in asked:
            u = declined.get(step.args[0])
            if u is not None:
                raise ScheduleError(f"schedule for stage {step.stage!r}: LLVM could not "
                                    f"vectorise loop {step.args[0]!r}: {u.reason}")

    def __call__(self, *arrays, out=None, **named):
        if out is not None and self._out_position is not None:
            self._check_out_clash(out, arrays, named)
        if named:
            arrays = by_name(self._in_specs, arrays, named)
        if len(arrays) != self._n_in:
            check_count(self._in_specs, len(arrays))
        ndarray = np.ndarray
        for (dtype, shape), a in zip(self._in_kinds, arrays):
            # the common case: every argument an array of exactly its kind (C-contiguous,
            # aligned, writeable), used in place; otherwise each is checked (and copied
            # where needed)
            if not (type(a) is ndarray and a.dtype is dtype and a.shape == shape
                    and a.flags.carray):
                arrays = tuple(spec.argument(a) for spec, a in zip(self._in_specs, arrays))
                break
        if out is None:
            outs = self._unreferenced_spare() or self._new_outputs()
        else:
            if not isinstance(out, (list, tuple)):
                raise TegradError(f"out must be a list of {len(self._out_specs)} arrays, got "
                                  f"{type(out).__name__}")
            check_count(self._out_specs, len(out), "outputs")
            # overlaps between the arrays the kernel gets are checked natively
            outs = list(out)
            for (shape, dtype), o in zip(self._empty, outs):
                # carray: C-contiguous, aligned and writeable, what an out array must be
                if not (type(o) is ndarray and o.dtype is dtype and o.shape == shape
                        and o.flags.carray):
                    outs = [spec.out(o) for spec, o in zip(self._out_specs, out)]
                    break
        self._run(arrays + tuple(outs))
        if out is None:
            self._spares.append(tuple(outs))
        return outs

    def _new_outputs(self):
        if self._oversized is not None:
            raise BufferTooLargeError(self._oversized)
        return [np.empty(shape, dtype) for shape, dtype in self._empty]

    def _check_out_clash(self, out, arrays, named):
        """Refuse a call that meant to give the input named ``out`` by keyword (it is not
        among the positional arguments): Python binds ``f(out=a)`` to the ``out=``
        keyword (the arrays the outputs are written into), never to the input."""
        position = self._out_position
        if position < len(arrays):
            return
        names = [s.name for s in self._in_specs]
        given = len(arrays) + len(named)
        raise FeedError(
            f"the input 'out' (placeholder {self._in_specs[position].describe()}) cannot be "
            f"given by keyword: out= is the keyword for the arrays the outputs are written "
            f"into. Pass the inputs by position, f({', '.join(names)}), with 'out' as "
            f"argument {position + 1} (this call gave {given} other argument(s) and "
            f"out={type(out).__name__})")

    def _unreferenced_spare(self):
        """The outputs of an earlier call when nothing but this function references them
        (a view, a list holding them or a buffer export would), else None. ``pop`` is
        atomic, so two threads never get the same set."""
        try:
            spare = self._spares.pop()
        except IndexError:
            return None
        if all(n == _UNREFERENCED for n in _reference_counts(spare)):
            return list(spare)
        return None

    @property
    def kernel(self):
        """The loop-IR kernel that was compiled."""
        return self._executable.kernel

    @property
    def loops(self):
        """The loop nests, as readable pseudo-C."""
        return format_kernel(without_marks(
            self._executable.kernel, [u.loop for u in _unvectorised(self._executable)]))

    @property
    def schedule(self):
        """The :class:`~tegrad.codegen.schedule.steps.Schedule` of the steps made, printed
        per stage (see :mod:`tegrad.codegen.schedule.describe`); ``tg.build(...,
        schedule=f.schedule)`` compiles the same loops."""
        if self._schedule_value is None:
            # described when printed (no reference to this function: a build given this
            # schedule keeps it)
            steps, record, executable = self._steps(), self._schedule_record, self._executable

            def text():
                declined = [u.loop for u in _unvectorised(executable)]
                return str(schedule_value(executable.kernel, record, steps,
                                          declined=declined))
            self._schedule_value = Schedule(steps, text=text)
        return self._schedule_value

    @property
    def memory(self):
        """A :class:`MemoryReport` of one call: the bytes of its inputs, outputs and
        workspace, and their peak.

        >>> import tegrad as tg
        >>> x = tg.placeholder((1000,), dtype="float64", name="x")
        >>> f = tg.build([x], [tg.ops.exp(x) + 1.0])
        >>> f.memory.inputs, f.memory.outputs, f.memory.peak >= 16000
        (8000, 8000, True)
        """
        plan = self._executable.storage_plan
        return MemoryReport(_nbytes(self.inputs), _nbytes(self.outputs), 0, plan.nbytes,
                            plan.separate_bytes)

    @property
    def llvm_ir(self):
        """The optimised LLVM IR."""
        return self._executable.llvm_ir

    @property
    def asm(self):
        """The machine code, as assembly."""
        return self._executable.asm

    def profile(self):
        """Where the calls so far spent their time, per stage: a
        :class:`~tegrad.codegen.runtime.profile.Profile` (printed, a table). Needs
        ``tg.build(..., profile=True)``.

        >>> import numpy as np, tegrad as tg
        >>> x = tg.placeholder((8,), name="x")
        >>> y = tg.compute((8,), lambda i: x[i] * 2.0, name="y")
        >>> f = tg.build([x], [y], profile=True)
        >>> _ = f(np.ones(8, np.float32)); [(r.stages, r.calls) for r in f.profile().rows]
        [(('y',), 1)]
        """
        return profile_of(self._executable)

    def export(self, path, *, target=None, cpu=None, name=None, linker=None, threads=1,
               check_bounds=None, llvm_ir=False):
        """Write this function as ``<path>.o``, ``<path>.h`` and (when a linker for the
        target is found) a shared library, whose parallel loops run on ``threads`` threads
        (default 1: the library starts none), its accesses checked as this function's
        unless ``check_bounds`` says otherwise, ``<path>.ll`` too with ``llvm_ir``: see
        :func:`tegrad.export`. The program is compiled again by the same passes and
        schedule as this function, its parallel loops for ``threads``.

        >>> import tegrad as tg, tempfile, os
        >>> x = tg.placeholder((3,), name="x")
        >>> f = tg.build([x], [x * 2.0], name="twice", threads=2)
        >>> r = f.export(os.path.join(tempfile.mkdtemp(), "lib"))
        >>> [e.name for e in r.entries], r.kernels["twice"].name
        (['twice'], 'twice')
        """
        if check_bounds is None:
            check_bounds = self._executable.check_bounds
        return export_built(self.inputs, self.outputs, path, kernel_name=self.kernel.name,
                            schedule=self._schedule, name=name, target=target, cpu=cpu,
                            linker=linker, threads=threads, check_bounds=check_bounds,
                            llvm_ir=llvm_ir)

    def __reduce__(self):
        """Pickled by its program and build options, built again when unpickled (see
        :mod:`tegrad.codegen.runtime.pickling`), so it can go to a worker process."""
        try:
            reduce = PICKLING["reduce"]
        except KeyError:
            raise TegradError("compiled functions cannot be pickled: "
                              "tegrad.codegen.runtime.pickling is not loaded") from None
        return reduce(self)

    def __repr__(self):
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<CompiledFunction {self._executable.kernel.name}({ins}) -> [{outs}]>"


__all__ = ["CompiledFunction", "MemoryReport"]
