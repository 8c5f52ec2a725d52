"""Elementwise stages read once are computed where they are read.

A compute stage without a reduction, not an output, that the program reads at exactly
one place (and not as a scatter's ``init``) is substituted into its reader: no buffer,
no loop, no work repeated unless the one read is inside a reduction that visits an
element several times, which is allowed only for bodies of at most one float operation
(as zero elimination's inlining, :mod:`tegrad.zero_elim.inline`).

``inline_read_once(outputs)[k]`` computes the same values as ``outputs[k]``; the cost
model counts the lowered loops of the returned program.
"""
from __future__ import annotations

from tegrad.analysis.cost import local_flops
from tegrad.ir.expr import Read, Reduce
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import children, walk
from tegrad.ir.rewrite import map_stage, retarget, stage_exprs
from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScatterOp
from tegrad.zero_elim.inline import CHEAP_FLOPS, _Inliner  # one substitution of reads


def _read_sites(order):
    """``{id(tensor): [inside a reduction, ...]}`` for every read of every tensor."""
    sites = {}

    def visit(e, inside):
        if type(e) is Read:
            sites.setdefault(id(e.tensor), []).append(inside)
        for c in children(e):
            visit(c, inside or type(e) is Reduce)

    for t in order:
        for e in stage_exprs(t.op):
            visit(e, False)
        if isinstance(t.op, ComputeOp):
            for ax in t.op.axes:
                visit(ax.extent, False)
        if isinstance(t.op, ScatterOp) and t.op.init is not None:
            sites.setdefault(id(t.op.init), []).extend([False, False])
    return sites


def _inlinable(outputs):
    order = topological_order(outputs)
    sites = _read_sites(order)
    wanted = {id(t) for t in outputs}
    out = set()
    for t in order:
        if id(t) in wanted or not isinstance(t.op, ComputeOp):
            continue
        if any(type(n) is Reduce for n in walk(t.op.body)):
            continue
        reads = sites.get(id(t), [])
        if len(reads) == 1 and (not reads[0] or local_flops(t.op.body)[0] <= CHEAP_FLOPS):
            out.add(id(t))
    return out


def inline_read_once(outputs):
    """The outputs with their elementwise stages read once computed inline."""
    outputs = list(outputs)
    ids = _inlinable(outputs)
    if not ids:
        return outputs
    mapping, inlined = {}, {}
    inliner = _Inliner(inlined)
    for t in topological_order(outputs):
        if isinstance(t.op, PlaceholderOp):
            mapping[id(t)] = t
            continue
        new = map_stage(retarget(t, mapping), inliner)
        mapping[id(t)] = new
        if id(t) in ids:
            inlined[id(new)] = new
    return [mapping[id(t)] for t in outputs]
