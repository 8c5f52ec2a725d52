"""Performance building blocks the LLVM backend calls, each emitted into any
``llvmlite.ir.Module`` and tested on its own:

- :mod:`.fork_join`: the ABI of the fork-join of parallel loops, the thread pool's entry
  point ``tegrad_parallel_for`` (:func:`.fork_join.declare_parallel_for` declares it;
  the pool itself is run-time code, :mod:`tegrad.codegen.runtime.thread_pool`);
- :mod:`.gemm`: the register-blocked micro-kernel and macro-loops of a
  :class:`.gemm.GemmSpec` (:func:`.gemm.emit_gemm`), threaded through the pool, packing
  into slots of a space its caller passes (:mod:`.packspace`: nothing is allocated);
- :mod:`.dot`: a dot-product kernel for the products whose reduction runs along memory
  in both operands and whose outputs are few (:func:`.dot.emit_dot`);
- :mod:`.product`: which of the two runs a product (:func:`.product.emit_product`);
- :mod:`.irutil`: small IR helpers they share (the JIT that compiles them:
  :mod:`tegrad.codegen.target.jit`).

A stage's output computed by its plan (the operands at their plan offsets):

>>> import numpy as np, tegrad as tg
>>> from tegrad.codegen.lower.product_plans import detect_contraction, gemm_plan
>>> from tegrad.codegen.kernels.gemm import compile_gemm
>>> x, w = tg.placeholder((4, 3), name="x"), tg.placeholder((5, 3), name="w")
>>> plan = gemm_plan(detect_contraction(tg.nn.dense(x, w)))
>>> (plan.spec.m, plan.spec.n, plan.spec.k), plan.spec.b_strides
((4, 5, 3), (0, 1, 3))
>>> xa, wa = np.ones((4, 3), np.float32), np.ones((5, 3), np.float32)
>>> out = np.empty((4, 5), np.float32)
>>> compile_gemm(plan.spec).call_pointers(xa.ctypes.data, wa.ctypes.data, out.ctypes.data, 2)
>>> out.tolist()[0]
[3.0, 3.0, 3.0, 3.0, 3.0]
"""
