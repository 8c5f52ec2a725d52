"""Which kernel runs a matrix product (:class:`~.gemm.GemmSpec`): the register-blocked
gemm (:mod:`.gemm`) or the dot-product kernel (:mod:`.dot`), chosen from the spec alone
(:func:`product_kernel`), emitted by :func:`emit_product` and described for
``f.schedule`` by :func:`describe_product`; the packing space its caller passes it is
:func:`product_space_bytes` bytes.

>>> from tegrad.codegen.kernels.gemm import GemmSpec
>>> product_kernel(GemmSpec.dense("float32", 512, 512, 512))
'gemm'
>>> logits = GemmSpec("float32", 1, 32, 10, 6760, (0, 6760, 1), (0, 1, 6760), (0, 10, 1))
>>> product_kernel(logits)
'dot'
"""
from __future__ import annotations

import functools

from tegrad.codegen.kernels.dot import (dot_blocking, dot_layout, dot_space_bytes, emit_dot,
                                        prefers_dot)
from tegrad.codegen.kernels.gemm import default_blocking, emit_gemm, pack_space_bytes


@functools.lru_cache(maxsize=1024)
def product_kernel(spec, target=None):
    """``"dot"`` when ``spec``'s reduction is rows of runs along both operands and
    :func:`.dot.prefers_dot` says it pays on ``target`` (None: the host), else ``"gemm"``."""
    return "dot" if prefers_dot(spec, dot_layout(spec), target=target) else "gemm"


def emit_product(module, spec, *, name, shared=False, target=None):
    """Emit ``void name(A, B, C, i8 *space, i32 n_threads)`` computing ``spec`` on its
    kernel, blocked for ``target`` (a :class:`~tegrad.codegen.target.Target`, None: the
    host); ``space`` holds :func:`product_space_bytes` ``(spec, n_threads, target)``
    bytes (null when that is 0)."""
    emit = emit_dot if product_kernel(spec, target) == "dot" else emit_gemm
    return emit(module, spec, name=name, shared=shared, target=target)


def product_space_bytes(spec, threads, target=None):
    """The packing space (bytes) ``spec``'s kernel on ``target`` needs when called on
    ``threads`` threads: 0 for the dot kernel, a panel per thread for the gemm.

    >>> from tegrad.codegen.kernels.gemm import GemmSpec
    >>> mm = GemmSpec.dense("float32", 64, 64, 64)
    >>> product_space_bytes(mm, 2) > product_space_bytes(mm, 1) > 0
    True
    """
    if product_kernel(spec, target) == "dot":
        return dot_space_bytes(threads)
    return pack_space_bytes(spec, threads, default_blocking(spec.dtype, target=target))


def describe_product(spec, target=None):
    """The kernel of ``spec`` and its blocking on ``target`` (None: the host), in one line.

    >>> from tegrad.codegen.kernels.gemm import GemmSpec
    >>> describe_product(GemmSpec("float32", 1, 32, 10, 6760, (0, 6760, 1), (0, 1, 6760),
    ...                           (0, 10, 1))).split(";")[0]
    'dot kernel: batch 1, m 32, n 10, k 6760 (1 row of 6760)'
    """
    sizes = f"batch {spec.batch}, m {spec.m}, n {spec.n}, k {spec.k}"
    if product_kernel(spec, target) == "dot":
        layout, blk = dot_layout(spec), dot_blocking(spec, target=target)
        rows = len(layout.rows)
        return (f"dot kernel: {sizes} ({rows} row{'s' * (rows > 1)} of {layout.run}); "
                f"blocks of {blk.mr}x{blk.nr} outputs, each {blk.vl} lanes of partial sums")
    blk = default_blocking(spec.dtype, target=target)
    return (f"gemm kernel: {sizes}; blocks of {blk.mr}x{blk.nr} outputs in registers, "
            f"k in blocks of {blk.kc}, B packed {blk.nc} columns at a time")


__all__ = ["describe_product", "emit_product", "product_kernel", "product_space_bytes"]
