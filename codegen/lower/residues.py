"""Sums masked by residues are rewritten by zero elimination before they are lowered.

A transposed convolution, as the operator library writes it, sums over every tap and
keeps those whose offset divides by the stride::

    out[n, o, y, x] = sum(in[n, c, (y + p - ky) // s, ...] * w[c, o, ky, ...],
                          where (y + p - ky) % s == 0 && ...)

Its indices are divisions and its taps a residue class that depends on the output
position, so it is not a product the gemm kernel can run. Zero elimination solves the masks
(:func:`tegrad.zero_elim.stage.optimize_stage`): the sum runs over the input positions
that reach ``y`` directly, ``in[n, c, q, ...] * w[c, o, y + p - q * s, ...]`` with ``q`` in
a range that depends on ``y // s``, which lowers to one product per residue class of
``y``. The stage keeps its values (zero elimination's contract), up to the order of the
sum's terms; its gradients are those of the definition, differentiated before this.

``drop_residue_masks(outputs)[k]`` computes the same values as ``outputs[k]``.
"""
from __future__ import annotations

from tegrad.analysis.cost import CountError, stage_cost
from tegrad.ir.expr import Binary, Reduce
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import walk
from tegrad.ir.rewrite import rewrite_program
from tegrad.ir.stages import compute_body
from tegrad.zero_elim.stage import optimize_stage


def _residue_masked(t):
    """``t`` is a compute stage with a reduction whose condition tests a residue."""
    body = compute_body(t)
    if body is None:
        return False
    return any(type(n) is Reduce and n.where is not None
               and any(type(m) is Binary and m.op == "floormod" for m in walk(n.where))
               for n in walk(body))


def _unmasked(t, wanted):
    if not _residue_masked(t):
        return t
    new = optimize_stage(t)
    if new is t or compute_body(new) is None:
        return t
    try:
        # the masked loops already step over the residues that count (isl solves the
        # masks as strides): the new sum must not visit more points
        worse = stage_cost(new).iterations > stage_cost(t).iterations
    except CountError:
        return t
    return t if worse or not wanted(new) else new


def drop_residue_masks(outputs, wanted=lambda t: True):
    """The outputs with each stage whose sum is masked by residues rewritten by zero
    elimination where that visits no more points and ``wanted(rewritten stage)`` holds
    (the lowering asks for one with a gemm plan) (module doc).

    >>> import tegrad as tg
    >>> x = tg.placeholder((1, 1, 3, 3), name="x")
    >>> w = tg.placeholder((1, 1, 2, 2), name="w")
    >>> y = tg.nn.conv2d_transpose(x, w, stride=2)
    >>> "%" in str(y.op.body), "%" in str(drop_residue_masks([y])[0].op.body)
    (True, False)
    """
    outputs = list(outputs)
    if not any(_residue_masked(t) for t in topological_order(outputs)):
        return outputs  # (no walk of every stage's expressions to rebuild nothing)
    mapping = rewrite_program(outputs, lambda t: _unmasked(t, wanted))
    return [mapping[id(t)] for t in outputs]


__all__ = ["drop_residue_masks"]
