"""What code is generated for, and how LLVM makes it: the first layer of code generation.

- :mod:`.machine`: one :class:`Target` (triple, CPU, features, vector width), the host's
  (``tg.build``'s JIT) or an export's machine (``tg.export(target=..., cpu=...)``); the
  compile pipeline blocks and vectorises a kernel for its vector registers, and LLVM's
  target machine is made from the same triple, CPU and features;
- :mod:`.llvm_setup`: the one place that initialises LLVM, sets its options and
  registers the C library's math functions with the JIT;
- :mod:`.optimise`: the one optimisation pipeline (the loop unroller an explicit
  argument);
- :mod:`.jit`: the one JIT (:class:`~.jit.LoadedModule` for generated kernels, the
  process-wide functions of :func:`~.jit.shared_function`, engines kept alive).

>>> Target.parse("aarch64-linux-gnu").vector_bits
128
>>> Target.host() == Target.host() and Target.host().vector_bits in (128, 256, 512)
True
"""
from tegrad.codegen.target.llvm_setup import initialize
from tegrad.codegen.target.machine import (Target, TargetError, check_processor, host_features,
                                           host_triple, normalize_triple, processor_names,
                                           resolve, wide_vector_features)

__all__ = ["Target", "TargetError", "check_processor", "host_features", "host_triple",
           "initialize", "normalize_triple", "processor_names", "resolve",
           "wide_vector_features"]
