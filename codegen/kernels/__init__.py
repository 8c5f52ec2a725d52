"""Performance building blocks the LLVM backend calls: a native thread pool
(:mod:`.threadpool`), contraction detection (:mod:`.contraction`) and register-blocked
micro-kernels (:mod:`.gemm`), each emitted into any ``llvmlite.ir.Module``."""
