"""Compiled functions: ``build`` (public as ``tegrad.build``), argument checks, caching."""
from tegrad.codegen.runtime.builder import build, clear_cache
from tegrad.codegen.runtime.compiled import CompiledFunction
from tegrad.codegen.runtime import pickling  # noqa: F401  (installs CompiledFunction's pickling)

__all__ = ["CompiledFunction", "build", "clear_cache"]
