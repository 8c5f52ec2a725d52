"""Product steps: which stages run on product kernels, and which kernel and blocking.

Lowering runs a contraction stage (:func:`~tegrad.codegen.lower.contraction.contraction_plan`)
as calls of a product kernel; the kernel of each call (the register-blocked gemm or
the dot-product kernel) and its blocking follow from the call's shape and the target
(:mod:`tegrad.codegen.kernels.product`). :func:`product_steps` records them before
anything is emitted, one ``Step("product", tensor, entries)`` per stage name, an entry
per part of its plan:

- ``("gemm", batch, m, n, k, mr, nr, kc, nc)``: a gemm call, ``mr x nr`` outputs in
  registers, ``k`` in blocks of ``kc``, ``B`` packed ``nc`` columns at a time;
- ``("dot", batch, m, n, k, mr, nr, lanes)``: a dot-product call, ``mr x nr`` outputs
  per block, each ``lanes`` partial sums;
- ``("loops",)``: a part run as its loops (a residue class without a plan);
- ``("once", kept)``: the stage computed once over the output axes ``kept``, then copied
  along the others (the entries after it are that computation's).

A replay lowers as products exactly the stages its product steps name; it refuses a
product step its plan and target do not give (the emitted kernel follows them).

>>> import tegrad as tg
>>> from tegrad.codegen.target import Target
>>> a = tg.placeholder((32, 48), name="a"); b = tg.placeholder((48, 64), name="b")
>>> (step,) = product_steps([tg.ops.matmul(a, b)], (), Target.parse("x86_64-linux-gnu",
...                                                                    "haswell"))
>>> step.stage, step.args
('matmul', (('gemm', 1, 32, 64, 48, 6, 16, 256, 256),))
>>> product_lines(step.args)
['gemm product: batch 1, m 32, n 64, k 48; blocks of 6x16 outputs, k in blocks of 256, B packed 256 columns at a time']
"""
from __future__ import annotations

from tegrad.ir.graph import topological_order
from tegrad.ir.stages import is_placeholder

from tegrad.codegen.kernels.dot import dot_blocking
from tegrad.codegen.kernels.gemm import default_blocking
from tegrad.codegen.kernels.product import product_kernel
from tegrad.codegen.lower.contraction import Broadcast, contraction_plan
from tegrad.codegen.lower.program import prepare
from tegrad.codegen.schedule.steps import Step


def _entry(plan, target):
    spec = (plan.plan if hasattr(plan, "order") else plan).spec  # (a transposed plan's own)
    shape = (spec.batch, spec.m, spec.n, spec.k)
    if product_kernel(spec, target) == "dot":
        blk = dot_blocking(spec, target=target)
        return ("dot",) + shape + (blk.mr, blk.nr, blk.vl)
    blk = default_blocking(spec.dtype, target=target)
    return ("gemm",) + shape + (blk.mr, blk.nr, blk.kc, blk.nc)


def _entries(found, target):
    if isinstance(found, Broadcast):
        inner = [("loops",)] if found.found is None else _entries(found.found, target)
        return [("once", tuple(found.kept))] + inner
    return [("loops",) if plan is None else _entry(plan, target) for _, _, _, plan in found]


def product_steps(outputs, plain, target):
    """The product steps of the program ``outputs`` lowered with contractions (stages
    named in ``plain`` keep their loops) for ``target`` (module doc), in the order the
    stages are lowered."""
    plain = frozenset(plain)
    entries = {}
    for t in topological_order(prepare(outputs, True, plain)):
        if is_placeholder(t) or t.name in plain:
            continue
        found = contraction_plan(t)
        if found is not None:
            entries.setdefault(t.name, []).extend(_entries(found, target))
    return tuple(Step("product", name, tuple(e)) for name, e in entries.items())


def _line(entry):
    kind, rest = entry[0], entry[1:]
    if kind == "loops":
        return "a part run as its loops"
    if kind == "once":
        return f"computed once over its axes {list(rest[0])}, copied along the others"
    batch, m, n, k, mr, nr = rest[:6]
    sizes = f"batch {batch}, m {m}, n {n}, k {k}"
    if kind == "dot":
        return f"dot product: {sizes}; blocks of {mr}x{nr} outputs of {rest[6]} lanes"
    return (f"gemm product: {sizes}; blocks of {mr}x{nr} outputs, k in blocks of {rest[6]}, "
            f"B packed {rest[7]} columns at a time")


def product_lines(args):
    """The lines ``f.schedule`` shows for a product step's ``args``."""
    return [_line(e) for e in args]


__all__ = ["product_lines", "product_steps"]
