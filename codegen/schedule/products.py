"""Product steps: which statements call product kernels, and which kernel and blocking.

Lowering with contractions (the program step ``contractions``) runs a contraction stage
(:func:`~tegrad.codegen.lower.contraction.contraction_plan`) as calls of a product
kernel, except the stages a ``plain`` step names (they keep their loops); the kernel of
each call (the register-blocked gemm or the dot-product kernel) and its blocking follow
from the call's shape and the target (:mod:`tegrad.codegen.kernels.product`).
:func:`product_steps` records them before anything is emitted, one
``Step("product", statement, entries)`` per statement holding calls (named as the
other steps name statements, :mod:`.steps`), an entry per call in order:

- ``("gemm", batch, m, n, k, mr, nr, kc, nc)``: ``mr x nr`` outputs in registers, ``k`` in
  blocks of ``kc``, ``B`` packed ``nc`` columns at a time;
- ``("dot", batch, m, n, k, mr, nr, lanes)``: ``mr x nr`` outputs per block, each
  ``lanes`` partial sums.

A replay lowers the same way and refuses product steps that differ from the calls made
(the emitted kernels follow the plans and the target: a step cannot ask for others).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.target import Target
>>> a = tg.placeholder((32, 48), name="a"); b = tg.placeholder((48, 64), name="b")
>>> kernel = lower_program([a, b], [tg.ops.matmul(a, b)], contractions=True)
>>> (step,) = product_steps(kernel, Target.parse("x86_64-linux-gnu", "haswell"))
>>> step
Step('product', 'matmul', (('gemm', 1, 32, 64, 48, 6, 16, 256, 256),))
>>> product_lines(step.args)
['gemm product: batch 1, m 32, n 64, k 48; blocks of 6x16 outputs, k in blocks of 256, B packed 256 columns at a time']
"""
from __future__ import annotations

from tegrad.codegen.kernels.dot import dot_blocking
from tegrad.codegen.kernels.gemm import default_blocking
from tegrad.codegen.kernels.product import product_kernel
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct
from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.schedule.fusion import fusion_parts
from tegrad.codegen.schedule.steps import Step, names_of, statement_keys


def _entry(spec, target):
    shape = (spec.batch, spec.m, spec.n, spec.k)
    if product_kernel(spec, target) == "dot":
        blk = dot_blocking(spec, target=target)
        return ("dot",) + shape + (blk.mr, blk.nr, blk.vl)
    blk = default_blocking(spec.dtype, target=target)
    return ("gemm",) + shape + (blk.mr, blk.nr, blk.kc, blk.nc)


def product_steps(kernel, target):
    """The product steps of ``kernel`` (lowered, not scheduled yet) on ``target`` (module
    doc), in the order of its statements."""
    stmts = fusion_parts(kernel)
    keys, steps = statement_keys(names_of(stmts)), []
    for key, s in zip(keys, stmts):
        calls = [_entry(m.spec, target) for m in walk_stmts(s) if type(m) is MatrixProduct]
        if calls:
            steps.append(Step("product", key, tuple(calls)))
    return tuple(steps)


def check_products(given, made):
    """A ScheduleError naming the first statement whose product step in ``given`` differs
    from ``made`` (the steps of the kernel lowered, :func:`product_steps`)."""
    asked = {s.stage: s.args for s in given}
    done = {s.stage: s.args for s in made}
    for stage in list(asked) + [s for s in done if s not in asked]:
        if asked.get(stage) != done.get(stage):
            if stage not in done:
                why = "it calls no product kernel"
            elif stage not in asked:
                why = (f"it calls {len(done[stage])} (a 'plain' step of its tensor keeps its "
                       f"loops instead)")
            else:
                why = f"it calls {done[stage]!r} (they follow from its plan and the target)"
            raise ScheduleError(f"schedule for stage {stage!r}: its product step asks for "
                                f"{asked.get(stage)!r}, but {why}")


def _line(entry):
    kind, (batch, m, n, k, mr, nr, *blocks) = entry[0], entry[1:]
    sizes = f"batch {batch}, m {m}, n {n}, k {k}"
    if kind == "dot":
        return f"dot product: {sizes}; blocks of {mr}x{nr} outputs of {blocks[0]} lanes"
    return (f"gemm product: {sizes}; blocks of {mr}x{nr} outputs, k in blocks of {blocks[0]}, "
            f"B packed {blocks[1]} columns at a time")


def product_lines(args):
    """The lines ``f.schedule`` shows for a product step's ``args``."""
    return [_line(e) for e in args]


__all__ = ["check_products", "product_lines", "product_steps"]
