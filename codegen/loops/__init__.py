"""The loop-nest IR: kernels, loops, stores and loads over buffers (see :mod:`.nodes`)."""
