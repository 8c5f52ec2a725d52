"""Compiled functions: ``build`` (public as ``tegrad.build``), argument checks, caching.

The process's native thread pool (:mod:`.thread_pool`) is imported with the package, so
that the JIT links it before any kernel calling it. The rest is imported when first
asked for: the pool sits low in the layers (export links it into libraries), and
importing it must not import ``build`` and what ``build`` stands on.
"""
from tegrad.codegen.runtime import thread_pool  # noqa: F401  (provides the pool to the JIT)

__all__ = ["CompiledFunction", "build", "clear_cache"]


def __getattr__(name):
    """``build``, ``clear_cache`` and ``CompiledFunction``, imported on first use (with
    the pickling of compiled functions, which :mod:`.pickling` installs)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tegrad.codegen.runtime import pickling  # noqa: F401  (installs the pickling)
    from tegrad.codegen.runtime.builder import build, clear_cache
    from tegrad.codegen.runtime.compiled import CompiledFunction
    found = {"build": build, "clear_cache": clear_cache, "CompiledFunction": CompiledFunction}
    globals().update(found)
    return found[name]
