"""A loop-IR kernel compiled to machine code, with the storage it owns, callable on
numpy arrays.

The kernel's temporaries (and local buffers too large for the stack) are allocated once
and reused across calls; a lock serialises calls that share them, so two Python threads
calling at once both get correct results (ctypes releases the GIL during the native
call). A non-zero status from the kernel becomes the error its check describes. A child
forked (``os.fork``) while another thread held such a lock gets every lock anew, as that
thread does not exist there to release it.

The rare branches of the kernel (the ``otherwise`` of a ``likely`` ``If``: a matrix
product's exact loops for operands that are not all finite) are compiled only when a
call first needs one: until then the kernel stops there, and the call runs again, from
the start, in a second module compiled with them (a kernel only reads its arguments and
overwrites its outputs, so running it again gives the same results). A product's
fallback is about half of a convolution's code, and of its compile time.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Kernel, Load, Store
>>> A, B = Buffer("A", (3,), "float64", "input"), Buffer("B", (3,), "float64", "output")
>>> i = Var("i", "int64")
>>> exe = Executable(Kernel("twice", (A, B), (), For(i, Const(0, "int64"),
...                  Const(3, "int64"), Store(B, (i,), Load(A, (i,)) * 2.0))))
>>> a, b = np.arange(3.0), np.zeros(3)
>>> exe.run([a, b]); b.tolist()
[0.0, 2.0, 4.0]
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
import threading
import weakref

import numpy as np

from tegrad.ir.errors import TegradError
from tegrad.reference.memory import check_buffers_fit
from tegrad.codegen.loops.errors import status_error
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Allocate
from tegrad.codegen.tuning import ENGINE_BYTES, IR_BYTES_PER_CHARACTER
from tegrad.codegen.kernels.threadpool import PARALLEL_FOR, parallel_for_address
from tegrad.codegen.llvm.emit import RARE_BRANCH, STORAGE_ALIGNMENT, emit_kernel, overlap_pairs
from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.llvm.target import LoadedModule, data_layout, host_triple



@functools.lru_cache(maxsize=None)
def python_abi():
    """``(tuple_items_offset, array_data_offset)``: where a Python tuple keeps its items
    and a numpy array its data pointer, confirmed on probe objects; None when they cannot
    be confirmed (then pointers are passed through ctypes instead)."""
    word = ctypes.sizeof(ctypes.c_void_p)
    items_offset, data_offset = 3 * word, 2 * word  # after the (variable) object header
    probes = tuple(np.empty(k + 1, dtype=np.float64) for k in range(4))
    try:
        tuple_ok = all(ctypes.c_void_p.from_address(id(probes) + items_offset + word * k).value
                       == id(a) for k, a in enumerate(probes))
        array_ok = all(ctypes.c_void_p.from_address(id(a) + data_offset).value == a.ctypes.data
                       for a in probes)
    except (ValueError, OverflowError):
        return None
    return (items_offset, data_offset) if tuple_ok and array_ok else None


def aligned_empty(shape, dtype, alignment=STORAGE_ALIGNMENT):
    """An uninitialised C-contiguous array whose data starts on an ``alignment`` boundary."""
    dtype = np.dtype(dtype)
    n = max(int(np.prod(shape, dtype=np.int64)), 1)
    raw = np.empty(n * dtype.itemsize + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + n * dtype.itemsize].view(dtype)[:int(np.prod(shape))].reshape(shape)


def _view(block, offset, buffer):
    """The array of ``buffer`` (its shape and dtype; bool as uint8) at byte ``offset`` of
    the uint8 array ``block``."""
    dtype = np.dtype("uint8" if buffer.dtype == "bool" else buffer.dtype)
    n = int(np.prod(buffer.shape, dtype=np.int64))
    return block[offset:offset + n * dtype.itemsize].view(dtype).reshape(buffer.shape)


#: every executable alive, whose locks a forked child replaces
_live = weakref.WeakSet()


def _new_locks_in_child():
    for exe in list(_live):
        if exe._lock is not None:
            exe._lock = threading.Lock()
        exe._complete_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)


def owned_buffers(kernel):
    """The buffers whose storage a kernel's executable may own: its temporaries and its
    local buffers (those too large for the stack live in that storage; the others are
    counted too, as no buffer larger than the machine fits anywhere)."""
    out = list(kernel.temps)
    for s in walk_stmts(kernel.body):
        if isinstance(s, Allocate) and s.buffer not in out:
            out.append(s.buffer)
    return out


class Executable:
    """``kernel`` compiled for this CPU. ``run(arrays)`` takes the kernel's arguments (C-
    contiguous aligned numpy arrays of the buffers' shapes and dtypes, already checked);
    ``run_pointers(pointers)`` takes their data pointers instead (ints), unchecked: an
    internal entry for callers that own the memory (see :meth:`run_pointers`).

    Its parallel loops run on ``threads`` threads of the process's native pool (None:
    every usable core, counted now; 1: no pool at all). With ``check_bounds``, every
    access to a buffer is checked at run time (see :func:`emit_kernel`). With
    ``defer_rare=False`` the rare branches are compiled at once (a kernel that updates
    its inputs in place cannot run again from the start). With ``profile``, the kernel
    times its statements (see :mod:`tegrad.codegen.runtime.profile`): ``profiled`` holds
    each loaded module with its counters' layout."""

    def __init__(self, kernel, *, threads=None, check_bounds=False, defer_rare=True,
                 profile=False):
        # before compiling: a temporary larger than the machine is refused by name, not
        # by numpy's MemoryError once the compile time is spent
        check_buffers_fit([(b.name, b.shape, "uint8" if b.dtype == "bool" else b.dtype)
                           for b in owned_buffers(kernel)], "temporary")
        self.kernel = kernel
        self.threads = resolve_threads(threads)
        self.check_bounds = bool(check_bounds)
        self.profile, self.profiled = bool(profile), []
        self._overlaps = overlap_pairs(kernel.args)
        km, text, loaded = self._compile(defer_rare=defer_rare)
        n_args = len(kernel.args)
        #: the storage: one block laid out by the kernel's plan (buffers of disjoint
        #: lifetimes share memory), and a view of it per buffer after the arguments
        self.storage_plan = km.storage
        self._block = aligned_empty((km.storage.nbytes,), "uint8")
        self.storage_arrays = [_view(self._block, km.storage.offsets[b], b)
                               for b in km.buffers[n_args:]]
        pointers = [a.ctypes.data for a in self.storage_arrays]
        self._storage = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        self._pack = struct.Struct(f"{n_args}P").pack
        self._storage_table = struct.pack(f"{len(pointers)}P", *pointers)
        self._lock = threading.Lock() if pointers else None
        self._complete_lock = threading.Lock()
        _live.add(self)
        #: (call, errors of its statuses, loaded module, emitted IR, the kernel's entry on
        #: a table of pointers), replaced as a whole once the rare branches are compiled
        #: (a call still running keeps its module)
        self._running = self._runner(km, text, loaded)

    def _compile(self, defer_rare):
        """``(emitted module, its text, loaded module)`` of the kernel, its rare branches
        deferred or not."""
        km = emit_kernel(self.kernel, triple=host_triple(), data_layout=data_layout(),
                         python_abi=python_abi(), threads=self.threads, shared_gemm=True,
                         defer_rare=defer_rare, check_bounds=self.check_bounds,
                         profile=self.profile)
        if PARALLEL_FOR in km.module.globals:
            parallel_for_address()  # the JIT resolves the module's calls to the pool
        text = str(km.module)
        return km, text, LoadedModule(text)

    def _runner(self, km, text, loaded):
        # the kernel's own entry, given one table of every buffer's pointer: a bytes
        # object, which ctypes passes as a char * (declaring the argument's type costs a
        # conversion call more, 0.1 us)
        raw = ctypes.CFUNCTYPE(ctypes.c_int32)(loaded.address(km.name))
        raw.argtypes = None
        if km.profile is not None:  # kept alive: profile() adds up every module's counters
            self.profiled.append((loaded, km.profile))
        return self._caller(km, loaded, raw), km.errors, loaded, text, raw

    def _caller(self, km, loaded, raw):
        """``call(arrays) -> status`` running the loaded module."""
        if python_abi() is not None:
            proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.py_object)
            entry = proto(loaded.address(f"{km.name}.py"))
            storage = self._storage
            return lambda arrays: entry(storage, tuple(arrays))
        overlaps, table = self._overlaps, self._table

        def call(arrays):
            for pair, (k, m) in enumerate(overlaps):
                if np.may_share_memory(arrays[k], arrays[m]):
                    return -(pair + 1)
            return raw(table([a.ctypes.data for a in arrays]))
        return call

    def _table(self, pointers):
        """The kernel's table of buffer pointers: the arguments' ``pointers`` (packed
        here, which refuses anything but an int that fits a pointer, and a count other
        than the arguments'), then the storage's (packed once). The kernel only reads
        the table, so an immutable bytes object serves."""
        return self._pack(*pointers) + self._storage_table

    def _complete(self, running):
        """The runner of the kernel with its rare branches compiled (compiled the first
        time; ``running`` is the runner whose call stopped at one)."""
        with self._complete_lock:
            if self._running is running:
                self._running = self._runner(*self._compile(defer_rare=False))
            return self._running

    def _status(self, call, arrays):
        if self._lock is None:
            return call(arrays)
        with self._lock:
            return call(arrays)

    @property
    def nbytes(self):
        """An estimate of the memory this executable holds: its storage (temporaries and
        large local buffers) and its compiled code, LLVM's engine included (measured: about
        0.8 MB per engine, plus about 8 bytes per character of emitted IR)."""
        storage = self._block.nbytes
        return storage + ENGINE_BYTES + IR_BYTES_PER_CHARACTER * len(self._running[3])

    @property
    def loaded(self):
        """The compiled module (without the rare branches until a call needs them)."""
        return self._running[2]

    @property
    def emitted_ir(self):
        """The LLVM IR as emitted, before optimisation."""
        return self._running[3]

    @property
    def llvm_ir(self):
        """The optimised LLVM IR."""
        return self.loaded.optimised_ir

    @property
    def asm(self):
        """The machine code, as assembly."""
        return self.loaded.asm

    def run(self, arrays):
        """Run the kernel on ``arrays`` (its arguments, in order); raise on a failed check."""
        running = self._running
        status = self._status(running[0], arrays)
        if status:
            self._failed(status, running, 0, arrays)

    def run_pointers(self, pointers):
        """Run the kernel on its arguments' data pointers (ints, in order); raise on a
        failed check. Internal: nothing but the count and that each is an int is
        checked, so the caller guarantees each addresses live, element-aligned,
        C-contiguous memory of its buffer's shape and dtype, and that no output overlaps
        another argument (memory it allocated for the call, as :mod:`tegrad.torch`
        does)."""
        # the body of _status and _table, inlined: this entry is timed in microseconds
        table = self._pack(*pointers) + self._storage_table
        running = self._running
        lock = self._lock
        if lock is None:
            status = running[4](table)
        else:
            lock.acquire()  # (a with statement costs 0.3 us more)
            try:
                status = running[4](table)
            finally:
                lock.release()
        if status:
            self._failed(status, running, 4, table)

    def _failed(self, status, running, entry, args):
        """After ``running[entry](args)`` returned ``status`` (non-zero): run it again
        with the rare branches compiled when it stopped at one, else (or if that fails
        too) raise the error its status describes."""
        if status > 0 and running[1][status - 1][0] == RARE_BRANCH:
            running = self._complete(running)
            status = self._status(running[entry], args)
        if status > 0:
            raise status_error(*running[1][status - 1])
        if status < 0:
            k, m = self._overlaps[-status - 1]
            args = self.kernel.args
            what = "another out array" if args[m].scope == "output" else "the argument"
            raise TegradError(f"out array for {args[k].name!r} overlaps {what} "
                              f"{args[m].name!r}")


__all__ = ["Executable", "aligned_empty", "owned_buffers", "python_abi", "status_error"]
