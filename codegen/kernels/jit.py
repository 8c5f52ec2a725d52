"""The host's LLVM target and a process-lifetime JIT for the kernels of this package.

Compiled code is never freed: worker threads of the thread pool run JIT code until the
process exits, and kernels hold the pool's address, so every engine made here is kept
alive for the life of the process (a freed engine under a running worker is a crash).

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
import os
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tegrad.codegen.target import Target
from tegrad.codegen import object_cache

_lock = threading.Lock()
#: every engine ever made, kept (see the module docstring)
_engines = []


@functools.lru_cache(maxsize=None)
def _initialized():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


def vector_bits():
    """The width in bits of the host's widest float vector registers (128 at least)."""
    return Target.host().vector_bits


@functools.lru_cache(maxsize=None)
def host_target_machine():
    """An O3 target machine for the host (triple, CPU name and features)."""
    _initialized()
    return Target.host().target_machine(opt=3, codemodel="jitdefault")


def host_triple():
    _initialized()
    return Target.host().triple


def optimize(module_ref, *, speed_level=3):
    """Run the new pass manager's O``speed_level`` pipeline with loop and SLP vectorisation."""
    tm = host_target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(module_ref, pb)
    return module_ref


def compile_module(module, *, speed_level=3):
    """JIT-compile an ``llvmlite.ir.Module`` for the host; the engine lives forever."""
    return _compiled(module, speed_level)[0]


def _compiled(module, speed_level=3):
    """``(engine, the object-cache key of its machine code)`` of ``module`` (see
    :func:`compile_module`)."""
    _initialized()
    module.triple = host_triple()
    module.data_layout = str(host_target_machine().target_data)
    text = str(module)
    host = Target.host()
    key = object_cache.entry_key(text, host.triple, host.cpu, host.features,
                                 f"O{speed_level} unrolled")
    engine = object_cache.loaded_engine(key, host_target_machine())
    ref = None
    if engine is None:
        ref = llvm.parse_assembly(text)
        ref.verify()
        optimize(ref, speed_level=speed_level)
    return _kept(engine, ref, key), key


def _kept(engine, ref, key):
    """``engine`` (None: a new one compiling the module ``ref``, stored under ``key``),
    its constructors run, kept for the life of the process."""
    with _lock:
        if engine is None:
            engine = llvm.create_mcjit_compiler(ref, host_target_machine())
            object_cache.finalize_and_store(engine, key)
        engine.run_static_constructors()
        _engines.append(engine)
        # The interpreter's shutdown must not free this code either.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))
    return engine


_shared_lock = threading.Lock()
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
    functions are registered too (see :func:`shared_address`).

    >>> def build(module):
    ...     f = ir.Function(module, ir.FunctionType(ir.IntType(64), []), name="doc.seven")
    ...     ir.IRBuilder(f.append_basic_block()).ret(ir.Constant(ir.IntType(64), 7))
    >>> shared_function("doc.seven", build) == shared_function("doc.seven", None)
    True
    """
    address = _shared.get(name)
    if address is None:
        with _shared_lock:
            address = _shared.get(name)
            if address is None:
                module = ir.Module(name=name)
                build(module)
                engine, key = _compiled(module)
                defined = [f.name for f in module.functions
                           if not f.is_declaration and f.linkage in ("", "external")]
                calls = [f.name for f in module.functions
                         if f.is_declaration and f.name in _shared]
                _register(engine, sorted(defined, key=lambda n: n == name), key, calls)
                address = _shared[name]
    return address


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
    with _shared_lock:
        if all(n in _shared for n in names):
            return True
        if not all(n in _shared for n in calls):
            return False
        engine = object_cache.loaded_engine(key, host_target_machine())
        if engine is None:
            return False
        _register(_kept(engine, None, key), list(names), key, calls)
    return True


def shared_address(name):
    """The address of ``name`` if a module of :func:`shared_function` defined it (the
    pool's reset after a fork), else None."""
    return _shared.get(name)


def _new_locks_in_child():
    # a thread of the parent that held one at fork() never releases it in the child
    global _lock, _shared_lock
    _lock, _shared_lock = threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)
