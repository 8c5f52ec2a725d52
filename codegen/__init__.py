"""Lowering of tegrad programs to loop nests and native code (LLVM through llvmlite).

:func:`build` (``tegrad.build``) compiles a program into a :class:`CompiledFunction`.
"""
from tegrad.codegen.runtime import CompiledFunction, build

__all__ = ["CompiledFunction", "build"]
