"""Lowering of tegrad programs to loop nests and native code (LLVM through llvmlite).

:func:`build` (``tegrad.build``) compiles a program into a :class:`CompiledFunction`;
:func:`export` (``tegrad.export``) writes it as an object file, a C header and a shared
library for this machine or another target.
"""
from tegrad.codegen.export.program import export
from tegrad.codegen.runtime import CompiledFunction, build, clear_cache

__all__ = ["CompiledFunction", "build", "clear_cache", "export"]
