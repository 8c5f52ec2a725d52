"""LLVM's process-wide state, set in one place: the targets it can generate code for, the
command-line options of its passes, and the C library functions JIT code may call.

Every way into LLVM (a :class:`~tegrad.codegen.target.Target`'s target machine, the JIT,
an export) makes a target machine first, which calls :func:`initialize`; so each option
below holds for every module this process optimises, for the JIT and for exports alike.

>>> initialize()
True
>>> "expf" in LIBM_SYMBOLS
True
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

import llvmlite.binding as llvm

from tegrad.codegen.tuning import EPILOGUE_MIN_LANES

#: the C library functions generated code may call, directly or through LLVM's libcalls
LIBM_SYMBOLS = ("erf", "exp", "expf", "exp2", "exp2f", "log", "logf", "sin", "sinf", "cos",
                "cosf", "tanh", "tanhf", "pow", "powf", "fmod", "fmodf", "sqrt", "sqrtf",
                "floor", "floorf", "ceil", "ceilf", "trunc", "truncf", "roundeven",
                "roundevenf", "fmax", "fmin", "fmaxf", "fminf", "tan", "tanf", "asin", "asinf",
                "acos", "acosf", "atan", "atanf", "atan2", "atan2f", "sinh", "sinhf", "cosh",
                "coshf", "asinh", "acosh", "atanh", "log1p", "expm1")

#: LLVM's command-line options (process-wide: ``llvm.set_option``), each with its reason
LLVM_OPTIONS = (
    # A vectorised loop of 8 lanes gets a vector epilogue too (LLVM's default: 16 and
    # more): a row of 28 runs as 3 x 8 + 4 lanes instead of 7 x 4 or 24 + 4 scalars (a
    # max-pool gradient's window passes: 165 -> 144 us on two threads).
    f"-epilogue-vectorization-minimum-VF={EPILOGUE_MIN_LANES}",
)


@functools.cache
def initialize():
    """Initialise LLVM for this process, once: every target and assembly printer (one
    process generates code for the host and for other machines), :data:`LLVM_OPTIONS`,
    and :data:`LIBM_SYMBOLS` registered with the JIT from the process's libm.

    llvmlite 0.50 raises on ``llvm.initialize()``; LLVM itself is initialised on import.
    """
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for option in LLVM_OPTIONS:
        llvm.set_option("", option)
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in LIBM_SYMBOLS:
        fn = getattr(libm, name, None)
        if fn is not None:
            llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
    return True


__all__ = ["LIBM_SYMBOLS", "LLVM_OPTIONS", "initialize"]
