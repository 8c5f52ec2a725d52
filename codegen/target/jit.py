"""The JIT: LLVM modules compiled to machine code in this process, for the host
:class:`~tegrad.codegen.target.Target`, through one MCJIT creation path under one lock,
their machine code kept in the object cache (a later process loads it).

Two kinds of module go through it (:data:`KERNEL`, :data:`HAND_WRITTEN`):

- generated kernels, :class:`LoadedModule` (from ``llvm/emit``'s IR text): optimised
  without LLVM's unroller (see :mod:`.optimise`); the engine lives as long as the
  loaded module;
- hand-written kernel modules: the process-wide functions of :func:`shared_function`
  (the thread pool, the gemm's micro-kernels and packing routines) and the modules of
  :func:`compile_module` (a gemm or dot kernel of its own), optimised with the unroller.
  Their code is never freed: worker threads of the pool run JIT code until the process
  exits, and kernels hold the pool's address, so every such engine is kept alive for
  the life of the process (a freed engine under a running worker is a crash).

A module may call the C library's math functions (:mod:`.llvm_setup` registers them),
the shared functions registered so far, and the runtime's functions that are made on
demand (:func:`provide`: the thread pool's entry, which
:mod:`tegrad.codegen.runtime.thread_pool` provides): a module declaring one of those is
linked only after it is compiled and registered (LLVM stops the process on a missing
symbol).

>>> import llvmlite.ir as ir
>>> m = ir.Module(name="doc")
>>> f = ir.Function(m, ir.FunctionType(ir.IntType(64), [ir.IntType(64)]), name="twice")
>>> b = ir.IRBuilder(f.append_basic_block())
>>> _ = b.ret(b.mul(f.args[0], ir.Constant(ir.IntType(64), 2)))
>>> import ctypes
>>> ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compile_module(m).get_function_address("twice"))(21)
42
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tegrad.codegen import object_cache
from tegrad.codegen.target.concurrent import compile_objects, usable_cores
from tegrad.codegen.target.machine import Target
from tegrad.codegen.target.optimise import optimise
from tegrad.codegen.target.split import split_module
from tegrad.codegen.tuning import BACKGROUND_SWITCH_INTERVAL, PARTS_PER_CORE, SPLIT_CHARACTERS


@dataclass(frozen=True)
class ModuleKind:
    """How the JIT compiles one kind of module: ``unroll``, LLVM's loop unroller on;
    ``jit_machine``, a target machine in JIT mode (on x86-64 the large code model);
    ``level``, what the object-cache key records of the optimisation; ``kept``, the
    engine kept (and its static constructors run) for the life of the process."""

    unroll: bool
    jit_machine: bool
    level: str
    kept: bool


#: generated kernels: no unroller (the schedule unrolls), a JIT-mode target machine,
#: freed with their :class:`LoadedModule`
KERNEL = ModuleKind(unroll=False, jit_machine=True, level="O3", kept=False)
#: hand-written kernel modules: the unroller on, the small code model (their calls to
#: other modules go through the JIT's stubs), kept for the life of the process
HAND_WRITTEN = ModuleKind(unroll=True, jit_machine=False, level="O3 unrolled", kept=True)

#: serialises compiling, linking and the registry (reentrant: a shared function's
#: module is built, and a runtime symbol provided, while another is being compiled)
_lock = threading.RLock()
#: every kept engine (see the module docstring)
_engines = []


def host_triple():
    """The host's triple, as LLVM names the process's."""
    return Target.host().triple


def vector_bits():
    """The width in bits of the host's widest float vector registers (128 at least)."""
    return Target.host().vector_bits


def new_target_machine(kind=KERNEL):
    """A new host target machine for modules of ``kind`` (an execution engine takes
    ownership of its own)."""
    return Target.host().target_machine(opt=3, codemodel="jitdefault", jit=kind.jit_machine)


@functools.lru_cache(maxsize=None)
def target_machine(kind=KERNEL):
    """The host's target machine for modules of ``kind``, for optimisation and assembly
    output."""
    return new_target_machine(kind)


def host_target_machine():
    """The host's target machine of hand-written kernel modules (:data:`HAND_WRITTEN`)."""
    return target_machine(HAND_WRITTEN)


@functools.lru_cache(maxsize=None)
def data_layout():
    """The host target's data layout string (read once: llvmlite's TargetData view of a
    target machine must not outlive a garbage collection of it)."""
    return str(target_machine().target_data)


def optimise_for_jit(module_ref, kind=KERNEL):
    """Optimise the binding module ``module_ref`` in place as the JIT does modules of
    ``kind``."""
    optimise(module_ref, target_machine(kind), unroll=kind.unroll)


def _key(ir_text, level):
    host = Target.host()
    return object_cache.entry_key(ir_text, host.triple, host.cpu, host.features, level)


def _engine(ir_text, kind, key, optimised=True):
    """``(engine, optimised module)`` of ``ir_text`` compiled as a module of ``kind``: the
    machine code stored under ``key`` in the object cache loaded (the module None then),
    else compiled and stored. The runtime symbols it declares are provided first. The
    one place engines are made: call with :data:`_lock` held."""
    _provide_declared(ir_text)
    engine = object_cache.loaded_engine(key, new_target_machine(kind))
    module_ref = None
    if engine is None:
        module_ref = llvm.parse_assembly(ir_text)
        module_ref.verify()
        if optimised:
            optimise_for_jit(module_ref, kind)
        engine = llvm.create_mcjit_compiler(module_ref, new_target_machine(kind))
        object_cache.finalize_and_store(engine, key)
    if kind.kept:
        _keep(engine)
    return engine, module_ref


def cached_engine(key, kind=KERNEL):
    """The engine of the machine code the object cache holds under ``key`` (a module of
    ``kind`` an earlier process compiled), or None; nothing is compiled. The functions
    it calls must be linked first (:func:`load_shared`)."""
    with _lock:
        engine = object_cache.loaded_engine(key, new_target_machine(kind))
        if engine is not None and kind.kept:
            _keep(engine)
    return engine


def _keep(engine):
    """Run ``engine``'s static constructors and keep it for the life of the process."""
    engine.run_static_constructors()
    _engines.append(engine)
    # The interpreter's shutdown must not free this code either.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))


# -- modules of hand-written kernels ------------------------------------------------------

def compile_module(module):
    """JIT-compile an ``llvmlite.ir.Module`` of hand-written kernels for the host; the
    engine lives forever."""
    return _compiled(module)[0]


def _compiled(module):
    """``(engine, the object-cache key of its machine code)`` of ``module`` (see
    :func:`compile_module`)."""
    module.triple = host_triple()
    module.data_layout = data_layout()
    text = str(module)
    key = _key(text, HAND_WRITTEN.level)
    with _lock:
        return _engine(text, HAND_WRITTEN, key)[0], key


#: name -> address of the functions compiled once for the whole process
_shared = {}
#: the modules of those functions, in the order they were made (a module's callees
#: first): ``(object-cache key, names defined, shared names called)`` each, so that a
#: later process can load them by key (:func:`shared_modules`, :func:`load_shared`)
_shared_modules = []
#: name -> its module's index in ``_shared_modules``
_module_of = {}


def shared_function(name, build):
    """The address of the function ``name``, compiled once per process (whichever threads
    ask first) from ``build(module)``, which defines it with external linkage in a module
    of its own, and registered, so that every JIT module declaring ``name`` calls it (the
    thread pool; a gemm micro-kernel or packing routine). The module's other external
    functions are registered too (see :func:`shared_address`). An earlier process's
    machine code for ``name`` is found by the name (:func:`_routine_key`), without
    calling ``build``.

    >>> def build(module):
    ...     f = ir.Function(module, ir.FunctionType(ir.IntType(64), []), name="doc.seven")
    ...     ir.IRBuilder(f.append_basic_block()).ret(ir.Constant(ir.IntType(64), 7))
    >>> shared_function("doc.seven", build) == shared_function("doc.seven", None)
    True
    """
    address = _shared.get(name)
    if address is None:
        with _lock:
            address = _shared.get(name)
            if address is None:
                if not _load_by_name(name):
                    module = ir.Module(name=name)
                    build(module)
                    engine, key = _compiled(module)
                    defined = [f.name for f in module.functions
                               if not f.is_declaration and f.linkage in ("", "external")]
                    calls = [f.name for f in module.functions
                             if f.is_declaration and f.name in _shared]
                    names = sorted(defined, key=lambda n: n == name)
                    _register(engine, names, key, calls)
                    _store_by_name(name, key, names, calls)
                address = _shared[name]
    return address


def _routine_key(name):
    """The on-disk cache's key of what :func:`shared_function` made for ``name`` in an
    earlier process: the routine's name, the compiler's source (which makes its IR from
    the name and the target alone), the versions and the target."""
    host = Target.host()
    return object_cache.digest(("shared routine", name, object_cache.source_fingerprint(),
                                object_cache.versions(), host.triple, host.cpu,
                                host.features))


def _load_by_name(name):
    """Register the shared function ``name`` from the machine code an earlier process
    made for it (found by :func:`_routine_key`, without emitting its module: 0.2-0.3 s of
    Python for a gemm's routines); False when the cache has no such entry, or its code,
    or the code of a routine it calls is not loaded yet."""
    if object_cache.cache_dir() is None:  # (no key to compute: the source's hash)
        return False
    payload = object_cache.load(_routine_key(name), "routine")
    loaded = False
    if payload is not None:
        try:
            entry = json.loads(payload)
            key, names, calls = entry["key"], list(entry["names"]), list(entry["calls"])
        except (ValueError, KeyError, TypeError):
            names = ()
        if name in names:
            for callee in calls:  # a runtime function it calls (the pool), as on linking
                if callee not in _shared and callee in _providers:
                    _providers[callee]()
            loaded = load_shared(key, names, calls)
    object_cache.STATS_OF["routine"]["hits" if loaded else "misses"] += 1
    return loaded


def _store_by_name(name, key, names, calls):
    """Record that ``name``'s module is the machine code under ``key``, defining ``names``
    and calling ``calls`` (see :func:`_load_by_name`)."""
    if object_cache.cache_dir() is not None:
        entry = {"key": key, "names": list(names), "calls": list(calls)}
        object_cache.store(_routine_key(name), json.dumps(entry).encode(), "routine")


def _register(engine, names, key, calls):
    """Register the functions ``names`` of ``engine`` (the last registered last), whose
    module is stored under ``key`` and calls the shared functions ``calls``."""
    for other in names:
        llvm.add_symbol(other, engine.get_function_address(other))
        _shared[other] = engine.get_function_address(other)
    for other in names:
        _module_of[other] = len(_shared_modules)
    _shared_modules.append((key, tuple(names), tuple(calls)))


def shared_modules(names):
    """``[(object-cache key, names defined, shared names called)]`` of the modules of
    :func:`shared_function` defining ``names`` (those of this process) and of the
    modules they call, in the order to load them (:func:`load_shared`: a later process
    then links code calling ``names`` without making them again)."""
    wanted, stack = set(), [_module_of[n] for n in names if n in _module_of]
    while stack:
        k = stack.pop()
        if k not in wanted:
            wanted.add(k)
            stack.extend(_module_of[n] for n in _shared_modules[k][2] if n in _module_of)
    return [_shared_modules[k] for k in sorted(wanted)]


def load_shared(key, names, calls):
    """Register the shared functions ``names`` from the machine code the object cache
    holds under ``key`` (of a module of :func:`shared_modules` in an earlier process,
    calling ``calls``, loaded before it); False when the cache does not hold it or a
    function it calls is missing (LLVM would stop the process on linking it). Nothing
    is emitted or compiled."""
    with _lock:
        if all(n in _shared for n in names):
            return True
        if not all(n in _shared for n in calls):
            return False
        engine = object_cache.loaded_engine(key, new_target_machine(HAND_WRITTEN))
        if engine is None:
            return False
        _keep(engine)
        _register(engine, list(names), key, calls)
    return True


#: name -> ``(build, future)`` of a shared function requested with
#: :func:`request_shared` and not yet awaited (the future None in a child process forked
#: while it was compiling: no thread of the parent runs there)
_requested = {}
#: the thread that compiles requested shared functions (made on first request)
_background = None
#: guards :data:`_requested` and :data:`_background` (never held while compiling)
_request_lock = threading.Lock()


def request_shared(name, build):
    """Start compiling the shared function ``name`` as :func:`shared_function` does, on
    the JIT's background thread, and return at once: a module declaring it is emitted
    meanwhile, and :class:`LoadedModule` waits for every request before it links one.
    LLVM releases the interpreter while it compiles (one compile at a time: llvmlite
    serialises its calls), so the gemm's shared routines of a first build compile while
    the rest of its kernel is emitted, on a second core.

    >>> def build(module):
    ...     f = ir.Function(module, ir.FunctionType(ir.IntType(64), []), name="doc.eight")
    ...     ir.IRBuilder(f.append_basic_block()).ret(ir.Constant(ir.IntType(64), 8))
    >>> request_shared("doc.eight", build); await_requested()
    >>> shared_address("doc.eight") is not None
    True
    """
    global _background
    with _request_lock:
        if name in _shared or name in _requested:
            return
        if _background is None:
            _background = ThreadPoolExecutor(1, thread_name_prefix="tegrad-jit")
        _quick_switches(+1)
        _requested[name] = (build, _background.submit(_compile_requested, name, build))


def _compile_requested(name, build):
    try:
        shared_function(name, build)
    finally:
        with _request_lock:
            _quick_switches(-1)


#: requests being compiled, and the switch interval the interpreter had before the first
#: (:func:`_quick_switches`)
_switching = [0, None]


def _quick_switches(change):
    """Count a request started (+1) or done (-1): while any is pending, the interpreter
    switches threads after :data:`BACKGROUND_SWITCH_INTERVAL` instead of its own interval
    (5 ms by default), which is restored once none is. Between two calls into LLVM the
    background thread runs Python (a few lines, or a routine's IR to emit) and waits for
    the interpreter's lock, which the thread lowering the program holds: a switch a
    request. Call with :data:`_request_lock` held."""
    if change > 0 and _switching[0] == 0:
        _switching[1] = sys.getswitchinterval()
        sys.setswitchinterval(min(_switching[1], BACKGROUND_SWITCH_INTERVAL))
    _switching[0] += change
    if change < 0 and _switching[0] == 0:
        if sys.getswitchinterval() == min(_switching[1], BACKGROUND_SWITCH_INTERVAL):
            sys.setswitchinterval(_switching[1])  # (unless the program set its own)


def await_requested():
    """Wait until every function of :func:`request_shared` is compiled and registered
    (raising the error of one that failed). Call without :data:`_lock` held: the
    background thread takes it to compile."""
    while _requested:
        with _request_lock:
            if not _requested:
                return
            name, (build, future) = next(iter(_requested.items()))
        try:
            if future is None:  # its compile began in the parent process
                shared_function(name, build)
            else:
                future.result()
        finally:
            with _request_lock:
                _requested.pop(name, None)


def shared_address(name):
    """The address of ``name`` if a module of :func:`shared_function` defined it (the
    pool's reset after a fork), else None."""
    return _shared.get(name)


# -- runtime functions made on demand ----------------------------------------------------

#: name -> the function that compiles and registers it (:func:`provide`)
_providers = {}


def provide(name, make):
    """Have ``make()`` (which registers the shared function ``name``, returning its
    address) run before the JIT links a module declaring ``name``: how the runtime's
    functions (the thread pool) reach the kernels that call them, which import only
    their ABI."""
    _providers[name] = make


def _provide_declared(ir_text):
    """Run the providers of the functions ``ir_text`` declares and that are not registered
    yet."""
    for name, make in list(_providers.items()):
        if name not in _shared and re.search(
                rf'^declare [^\n]*@"?{re.escape(name)}"?\(', ir_text, re.MULTILINE):
            make()


# -- generated kernels ------------------------------------------------------------------

class LoadedModule:
    """A module of generated kernels (IR text) compiled to machine code in this process,
    or loaded from the object cache; keeps its engine alive."""

    def __init__(self, ir_text, *, optimise_module=True):
        self._ir_text, self._optimise = ir_text, optimise_module
        self.key = _key(ir_text, KERNEL.level if optimise_module else "O0")
        workers = usable_cores()
        if optimise_module and workers > 1 and len(ir_text) >= SPLIT_CHARACTERS:
            # the optimised module is not kept: optimised_ir optimises it whole, as
            # after a cache hit
            self.engine, self._module = _engine_in_parts(ir_text, self.key, workers), None
            return
        await_requested()  # the shared functions it may call, registered before linking
        with _lock:
            # owned by the engine, which keeps it alive; None: loaded from the cache
            self.engine, self._module = _engine(ir_text, KERNEL, self.key, optimise_module)

    @functools.cached_property
    def optimised_ir(self):
        """The optimised module as LLVM IR text (printed on first use; optimised again
        when the machine code came from the cache)."""
        with _lock:
            if self._module is None:
                module_ref = llvm.parse_assembly(self._ir_text)
                if self._optimise:
                    optimise_for_jit(module_ref)
                return str(module_ref)
            return str(self._module)

    @functools.cached_property
    def asm(self):
        """The machine code as assembly (generated on first use: it costs as much as
        compiling)."""
        ir_text = self.optimised_ir
        with _lock:
            return target_machine(KERNEL).emit_assembly(llvm.parse_assembly(ir_text))

    def address(self, name):
        """The address of the function ``name``."""
        return self.engine.get_function_address(name)

    def global_address(self, name):
        """The address of the global variable ``name``."""
        return self.engine.get_global_value_address(name)


def _engine_in_parts(ir_text, key, workers):
    """The engine of the kernel module ``ir_text``, compiled in parts on ``workers``
    cores at once (:mod:`.split`, :mod:`.concurrent`; its object files stored under
    ``key``, or loaded from there) and linked into one engine. Compiling needs no
    symbol: the shared functions may still be compiling meanwhile."""
    objects = object_cache.load_objects(key)
    if objects is None:
        parts = split_module(ir_text, PARTS_PER_CORE * workers)
        objects = compile_objects(parts, functools.partial(new_target_machine, KERNEL),
                                  unroll=KERNEL.unroll, workers=workers)
        object_cache.store_objects(key, objects)
    await_requested()  # the shared functions it may call, registered before linking
    with _lock:
        _provide_declared(ir_text)
        return object_cache.engine_of(objects, new_target_machine(KERNEL))


def _new_lock_in_child():
    # a thread of the parent that held it at fork() never releases it in the child, and
    # the parent's background thread does not run there: its requests compile on demand
    global _lock, _request_lock, _background
    _lock, _request_lock, _background = threading.RLock(), threading.Lock(), None
    if _switching[0]:  # no thread compiles here: the interpreter's own interval back
        _switching[0] = 0
        sys.setswitchinterval(_switching[1])
    for name, (build, _) in list(_requested.items()):
        _requested[name] = (build, None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


__all__ = ["HAND_WRITTEN", "KERNEL", "LoadedModule", "ModuleKind", "cached_engine", "compile_module",
           "data_layout", "host_target_machine", "host_triple", "load_shared",
           "new_target_machine", "optimise_for_jit", "provide", "request_shared",
           "await_requested", "shared_address", "shared_function",
           "shared_modules", "target_machine", "vector_bits"]
