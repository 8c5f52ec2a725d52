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

Construction is two steps: emitting the kernel's module (and compiling it, or loading
its machine code from the object cache), then loading it and setting up the Python side
from the :class:`ModuleFacts` of that module. A later process given the kernel and those
facts (:mod:`.program_cache`) takes the second step alone, :meth:`Executable.from_facts`:
nothing is emitted until something asks for the IR or a rare branch.

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
from dataclasses import dataclass

import numpy as np

from tegrad.ir.errors import TegradError
from tegrad.reference.memory import check_buffers_fit
from tegrad.codegen.loops.errors import status_error
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Allocate
from tegrad.codegen.tuning import ENGINE_BYTES, IR_BYTES_PER_CHARACTER
from tegrad.codegen.runtime.thread_pool import PARALLEL_FOR, request_parallel_for
from tegrad.codegen.llvm.emit import RARE_BRANCH, STORAGE_ALIGNMENT, emit_kernel, overlap_pairs
from tegrad.codegen.llvm.kernel_buffers import StoragePlan
from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.target.jit import (LoadedModule, cached_engine, data_layout, host_triple,
                                      load_shared, shared_address,
                                      shared_modules)


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


def _owned_sizes(kernel):
    """``(name, shape, dtype)`` of each buffer whose storage ``kernel``'s executable may
    own (bool held as uint8), as :func:`check_buffers_fit` takes them."""
    return tuple((b.name, b.shape, "uint8" if b.dtype == "bool" else b.dtype)
                 for b in owned_buffers(kernel))


@dataclass(frozen=True)
class ModuleFacts:
    """What running a kernel's emitted module needs besides its machine code: ``name``
    (the kernel's symbol), ``buffers`` (the order of its table of pointers, the
    ``n_args`` arguments first), ``errors`` (per status code), ``storage`` (the plan of
    the buffers after the arguments), ``owned`` (:func:`_owned_sizes`), ``shared`` (the
    modules of the process-wide functions it calls, the thread pool and the products'
    routines, in the order to load them: see
    :func:`~tegrad.codegen.target.jit.shared_modules`), ``ir_chars`` (the length of its
    IR) and ``object_key`` (its machine code's key in the object cache). Plain data: a
    later process runs the module from them (:meth:`Executable.from_facts`)."""

    name: str
    buffers: tuple
    n_args: int
    errors: tuple
    storage: StoragePlan
    owned: tuple
    shared: tuple
    ir_chars: int
    object_key: str


class _CachedModule(LoadedModule):
    """Machine code an earlier process compiled, loaded from the object cache (see
    :meth:`Executable.from_facts`). Its IR, which ``optimised_ir`` and ``asm`` start
    from, is emitted again when first asked for (``emit_text()``)."""

    def __init__(self, engine, key, emit_text):
        # LoadedModule's state for code it did not compile (its ``_module`` None: the
        # optimised IR is made again from the text when asked for)
        self.engine, self.key, self._module, self._optimise = engine, key, None, True
        self._emit_text = emit_text

    @functools.cached_property
    def _ir_text(self):
        return self._emit_text()


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
        owned = _owned_sizes(kernel)
        self.kernel = kernel
        self.profile, self.profiled = bool(profile), []
        self._prepare(threads, check_bounds, owned)
        km, text, loaded = self._compile(defer_rare=defer_rare)
        #: the facts of the module first loaded (:meth:`from_facts` loads it again)
        calls = [f.name for f in km.module.functions
                 if f.is_declaration and shared_address(f.name) is not None]
        self.facts = ModuleFacts(km.name, km.buffers, len(kernel.args), km.errors, km.storage,
                                 owned, tuple(shared_modules(calls)), len(text), loaded.key)
        self._start(loaded, text)

    @classmethod
    def from_facts(cls, facts, kernel, *, threads=None, check_bounds=False):
        """The executable of the kernel whose module (its rare branches deferred) an
        earlier process emitted, as ``facts`` describe it, its machine code loaded from
        the object cache: nothing is emitted or compiled. ``kernel`` is the kernel, or a
        function giving it, called when first needed (for its text, the IR, a rare
        branch). None when the object cache does not have that code."""
        self = cls.__new__(cls)
        self.profile, self.profiled = False, []  # (a profiled build is not cached)
        if callable(kernel):
            self._kernel_of = kernel
        else:
            self.kernel = kernel
        self._prepare(threads, check_bounds, facts.owned)
        # the functions it calls are linked first (LLVM stops the process on a missing one)
        if not all(load_shared(*module) for module in facts.shared):
            return None
        engine = cached_engine(facts.object_key)
        if engine is None:
            return None
        self.facts = facts
        text = lambda: str(self._emit(defer_rare=True).module)  # noqa: E731
        self._start(_CachedModule(engine, facts.object_key, text), None)
        return self

    @functools.cached_property
    def kernel(self):
        """The loop-IR kernel (read when first needed, for an executable made
        :meth:`from_facts` without it)."""
        kernel = self._kernel_of()
        del self._kernel_of
        return kernel

    @functools.cached_property
    def _overlaps(self):
        """The pairs of arguments that must not overlap (see :func:`overlap_pairs`)."""
        return overlap_pairs(self.facts.buffers[:self.facts.n_args])

    def _prepare(self, threads, check_bounds, owned):
        # before compiling: a temporary larger than the machine is refused by name, not
        # by numpy's MemoryError once the compile time is spent
        check_buffers_fit(owned, "temporary")
        self.threads = resolve_threads(threads)
        self.check_bounds = bool(check_bounds)

    def _start(self, loaded, text):
        """Set up the storage and the runner of the module ``loaded`` (of
        :attr:`facts`; ``text`` its IR, None when not emitted in this process)."""
        facts = self.facts
        n_args = facts.n_args
        #: the storage: one block laid out by the kernel's plan (buffers of disjoint
        #: lifetimes share memory), and a view of it per buffer after the arguments
        self.storage_plan = facts.storage
        self._block = aligned_empty((facts.storage.nbytes,), "uint8")
        self.storage_arrays = [_view(self._block, facts.storage.offsets[b], b)
                               for b in facts.buffers[n_args:]]
        pointers = [a.ctypes.data for a in self.storage_arrays]
        self._storage = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        self._pack = struct.Struct(f"{n_args}P").pack
        self._storage_table = struct.pack(f"{len(pointers)}P", *pointers)
        self._lock = threading.Lock() if pointers else None
        self._complete_lock = threading.Lock()
        _live.add(self)
        #: (call, errors of its statuses, loaded module, emitted IR (None: not emitted
        #: in this process), the kernel's entry on a table of pointers), replaced as a
        #: whole once the rare branches are compiled (a call still running keeps its
        #: module)
        self._running = self._runner(facts.name, facts.errors, text, loaded)

    def _emit(self, defer_rare):
        """The kernel's emitted module, its rare branches deferred or not."""
        return emit_kernel(self.kernel, triple=host_triple(), data_layout=data_layout(),
                           python_abi=python_abi(), threads=self.threads, shared_gemm=True,
                           defer_rare=defer_rare, check_bounds=self.check_bounds,
                           profile=self.profile)

    def _compile(self, defer_rare):
        """``(emitted module, its text, loaded module)`` of the kernel, its rare branches
        deferred or not."""
        km = self._emit(defer_rare)
        if PARALLEL_FOR in km.module.globals:
            # the JIT resolves the module's calls to the pool: compiled (once) while the
            # module is printed
            request_parallel_for()
        text = str(km.module)
        loaded = LoadedModule(text)
        if km.profile is not None:  # kept alive: profile() adds up every module's counters
            self.profiled.append((loaded, km.profile))
        return km, text, loaded

    def _runner(self, name, errors, text, loaded):
        # the kernel's own entry, given one table of every buffer's pointer: a bytes
        # object, which ctypes passes as a char * (declaring the argument's type costs a
        # conversion call more, 0.1 us)
        raw = ctypes.CFUNCTYPE(ctypes.c_int32)(loaded.address(name))
        raw.argtypes = None
        return self._caller(name, loaded, raw), errors, loaded, text, raw

    def _caller(self, name, loaded, raw):
        """``call(arrays) -> status`` running the loaded module."""
        if python_abi() is not None:
            proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.py_object)
            entry = proto(loaded.address(f"{name}.py"))
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
                km, text, loaded = self._compile(defer_rare=False)
                self._running = self._runner(km.name, km.errors, text, loaded)
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
        text = self._running[3]
        chars = self.facts.ir_chars if text is None else len(text)
        return storage + ENGINE_BYTES + IR_BYTES_PER_CHARACTER * chars

    @property
    def loaded(self):
        """The compiled module (without the rare branches until a call needs them)."""
        return self._running[2]

    @property
    def emitted_ir(self):
        """The LLVM IR as emitted, before optimisation."""
        text = self._running[3]
        return self.loaded._ir_text if text is None else text

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
            args = self.facts.buffers
            what = "another out array" if args[m].scope == "output" else "the argument"
            raise TegradError(f"out array for {args[k].name!r} overlaps {what} "
                              f"{args[m].name!r}")


__all__ = ["Executable", "ModuleFacts", "aligned_empty", "owned_buffers", "python_abi",
           "status_error"]
