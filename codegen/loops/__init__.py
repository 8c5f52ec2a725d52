"""The loop-nest IR: kernels, loops, stores and loads over buffers (see :mod:`.nodes`)."""

from tegrad.codegen.loops import printer  # noqa: F401  (installs the text of loads)
