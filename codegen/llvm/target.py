"""The host target, LLVM's O3 pipeline and the JIT that loads kernels into this process.

Code is generated for the host's triple, CPU name and features; optimised with the new
pass manager at O3 with loop and SLP vectorisation on; and loaded with MCJIT. The C
library's math functions that generated code calls (``erf``, and the ones LLVM turns
intrinsics into, such as ``expf``) are registered with the JIT from the process's libm.

>>> tm = target_machine()
>>> tm.triple == host_triple()
True
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading

import llvmlite.binding as llvm

from tegrad.codegen.target import Target
from tegrad.codegen.tuning import EPILOGUE_MIN_LANES
from tegrad.codegen import object_cache

#: the C library functions generated code may call, directly or through LLVM's libcalls
LIBM_SYMBOLS = ("erf", "exp", "expf", "exp2", "exp2f", "log", "logf", "sin", "sinf", "cos",
                "cosf", "tanh", "tanhf", "pow", "powf", "fmod", "fmodf", "sqrt", "sqrtf",
                "floor", "floorf", "ceil", "ceilf", "trunc", "truncf", "roundeven",
                "roundevenf", "fmax", "fmin", "fmaxf", "fminf", "tan", "tanf", "asin", "asinf",
                "acos", "acosf", "atan", "atanf", "atan2", "atan2f", "sinh", "sinhf", "cosh",
                "coshf", "asinh", "acosh", "atanh", "log1p", "expm1")

_lock = threading.Lock()


def _new_lock_in_child():
    # a thread of the parent compiling at fork() never releases the lock in the child
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


@functools.lru_cache(maxsize=None)
def _initialise():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # A vectorised loop of 8 lanes gets a vector epilogue too (LLVM's default: 16 and
    # more): a row of 28 runs as 3 x 8 + 4 lanes instead of 7 x 4 or 24 + 4 scalars (a
    # max-pool gradient's window passes: 165 -> 144 us on two threads).
    llvm.set_option("", f"-epilogue-vectorization-minimum-VF={EPILOGUE_MIN_LANES}")
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in LIBM_SYMBOLS:
        fn = getattr(libm, name, None)
        if fn is not None:
            llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
    return True


def host_triple():
    return Target.host().triple


@functools.lru_cache(maxsize=None)
def target_machine():
    """The host's target machine (triple, CPU name and features, O3), for optimisation
    and assembly output."""
    return new_target_machine()


def new_target_machine():
    """A new host target machine (an execution engine takes ownership of its own)."""
    _initialise()
    return Target.host().target_machine(opt=3, codemodel="jitdefault", jit=True)


@functools.lru_cache(maxsize=None)
def data_layout():
    """The host target's data layout string (read once: llvmlite's TargetData view of a
    target machine must not outlive a garbage collection of it)."""
    return str(target_machine().target_data)


def optimise(module_ref):
    """Run LLVM's O3 pipeline (loop and SLP vectorisation on, unrolling off) over ``module_ref``."""
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    # LLVM's unroller fully unrolls every small constant-trip loop: 3-5x the compile time
    # and code size; loops a schedule wants unrolled are marked "unrolled" and unrolled
    # when emitted
    options.loop_unrolling = False
    builder = llvm.create_pass_builder(target_machine(), options)
    builder.getModulePassManager().run(module_ref, builder)


class LoadedModule:
    """A module compiled to machine code in this process; keeps its engine alive."""

    def __init__(self, ir_text, *, optimise_module=True):
        _initialise()
        host = Target.host()
        key = object_cache.entry_key(ir_text, host.triple, host.cpu, host.features,
                                     optimise_module)
        self._ir_text, self._optimise = ir_text, optimise_module
        self.key = key  # of its machine code in the object cache
        with _lock:
            # machine code of an earlier process is loaded, not compiled
            self._module = None
            self.engine = object_cache.loaded_engine(key, new_target_machine())
            if self.engine is not None:
                return
            module_ref = llvm.parse_assembly(ir_text)
            module_ref.verify()
            if optimise_module:
                optimise(module_ref)
            self._module = module_ref  # owned by the engine, which keeps it alive
            self.engine = llvm.create_mcjit_compiler(module_ref, new_target_machine())
            object_cache.finalize_and_store(self.engine, key)

    @functools.cached_property
    def optimised_ir(self):
        """The optimised module as LLVM IR text (printed on first use; optimised again
        when the machine code came from the cache)."""
        with _lock:
            if self._module is None:
                module_ref = llvm.parse_assembly(self._ir_text)
                if self._optimise:
                    optimise(module_ref)
                return str(module_ref)
            return str(self._module)

    @functools.cached_property
    def asm(self):
        """The machine code as assembly (generated on first use: it costs as much as
        compiling)."""
        ir_text = self.optimised_ir  # takes the lock itself, which is not reentrant
        with _lock:
            return target_machine().emit_assembly(llvm.parse_assembly(ir_text))

    def address(self, name):
        """The address of the function ``name``."""
        return self.engine.get_function_address(name)

    def global_address(self, name):
        """The address of the global variable ``name``."""
        return self.engine.get_global_value_address(name)


__all__ = ["LIBM_SYMBOLS", "LoadedModule", "data_layout", "host_triple", "optimise", "target_machine"]
