"""Elementwise stages read once are computed where they are read, and copies are read
through by the contractions that read them.

A compute stage without a reduction, not an output, that the program reads at exactly
one place (and not as a scatter's ``init``) is substituted into its reader: no buffer,
no loop, no work repeated unless the one read is inside a reduction that visits an
element several times, which is allowed only for bodies of at most one float operation
(as zero elimination's inlining, :mod:`tegrad.zero_elim.inline`).

A *copy* stage (a reshape, a transpose, a slice: a body that is one read of another
tensor, every index of it inside that tensor) whose readers all still run on the gemm
kernel with it substituted is substituted into them (:func:`read_through_copies`): a
product reads any operand whose row-major element offset is affine, so the copy's
buffer and its pass over memory go.

``inline_read_once(outputs)[k]`` and ``read_through_copies(outputs, ...)[k]`` compute
the same values as ``outputs[k]``; the cost model counts the lowered loops of the
returned program.
"""
from __future__ import annotations

from tegrad.analysis.cost import local_flops
from tegrad.analysis.simplify import simplify_exact
from tegrad.analysis.intervals import indices_inside
from tegrad.ir.expr import REDUCTIONS, Read, Var
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import walk
from tegrad.ir.stages import StageMapper, compute_body, stage_exprs
from tegrad.ir.tensor import ScatterOp
from tegrad.zero_elim.inline import CHEAP_FLOPS, inline_stages, read_sites


class _WholeReads(StageMapper):
    """The expressions of a stage read outside its body (a compute's axis extents) and
    the tensors it uses whole (a scatter's ``init``)."""

    def map_placeholder(self, t):
        return (), ()

    def map_compute(self, t):
        return tuple(ax.extent for ax in t.op.axes), ()

    def map_scatter(self, t):
        return (), (() if t.op.init is None else (t.op.init,))

    def map_scan(self, t):
        return (), ()


def _read_sites(order):
    """``{id(tensor): [(reader, inside a reduction), ...]}`` for every read of every
    tensor."""
    sites = {}
    extra = _WholeReads()

    for t in order:
        extents, whole = extra(t)
        for e in list(stage_exprs(t)) + list(extents):
            for tensor, inside in read_sites(e):
                sites.setdefault(id(tensor), []).append((t, inside))
        for w in whole:  # a whole tensor is never inlined: count it as two reads
            sites.setdefault(id(w), []).extend([(t, False), (t, False)])
    return sites


def _inlinable(outputs, keep_inputs_of):
    order = topological_order(outputs)
    sites = _read_sites(order)
    wanted = {id(t) for t in outputs}
    out = set()
    for t in order:
        body = compute_body(t)
        if id(t) in wanted or body is None:
            continue
        if any(type(n) in REDUCTIONS for n in walk(body)):
            continue
        reads = sites.get(id(t), [])
        if len(reads) != 1:
            continue
        reader, inside = reads[0]
        planned = keep_inputs_of is not None and keep_inputs_of(reader)
        if planned and isinstance(reader.op, ScatterOp):
            continue  # a scatter running as products sums its values: each is one read
        if not inside or (local_flops(body)[0] <= CHEAP_FLOPS and not planned):
            out.add(id(t))
    return out


def inline_read_once(outputs, *, keep_inputs_of=None):
    """The outputs with their elementwise stages read once computed inline, and then
    the stages that are another tensor under a new name (:func:`_is_alias`, such as
    ``dy[i, j] = 1.0 * head[i, j]`` once a stage of ones is inlined) read through by
    all their readers.

    A stage read inside a reduction of a stage ``r`` for which ``keep_inputs_of(r)``
    holds keeps its own buffer (a contraction of two reads runs on the gemm kernel,
    one of a read and an inlined product would not). Inlined expressions are simplified
    by the rules that hold for every value only (:func:`simplify_exact`)."""
    outputs = list(outputs)
    outputs = inline_stages(outputs, _inlinable(outputs, keep_inputs_of),
                            simplifier=simplify_exact)
    wanted = {id(t) for t in outputs}
    aliases = {id(t) for t in topological_order(outputs)
               if id(t) not in wanted and _is_alias(t)}
    return inline_stages(outputs, aliases, simplifier=None)


def _is_alias(t):
    """``t[i, j, ...] = u[i, j, ...]``: a stage reading another tensor of its shape and
    dtype at its own axes, in order (its readers can read ``u`` instead, at no cost)."""
    body = compute_body(t)
    return (type(body) is Read and body.tensor is not t and body.dtype == t.dtype
            and body.tensor.shape == t.shape
            and all(type(i) is Var and i.name == ax.name
                    for i, ax in zip(body.indices, t.op.axes)))


def _is_copy(t):
    """``t``'s stage only copies elements of another tensor, each read inside it."""
    body = compute_body(t)
    if type(body) is not Read or body.dtype != t.dtype or body.tensor is t:
        return False
    box = {ax.name: (0, n - 1) for ax, n in zip(t.op.axes, t.shape)}
    return indices_inside(body.indices, body.tensor.shape, box)


def read_through_copies(outputs, runs_as_product):
    """The outputs with each copy stage substituted into its readers when every reader
    ``r``, so rewritten, still ``runs_as_product(r)``; the copy is then computed by no
    stage."""
    outputs = list(outputs)
    order = topological_order(outputs)
    sites = _read_sites(order)
    wanted = {id(t) for t in outputs}
    chosen = set()
    for t in order:
        if id(t) in wanted or not _is_copy(t):
            continue
        readers = list({id(r): r for r, _ in sites.get(id(t), [])}.values())
        if readers and all(runs_as_product(_with_copy_inlined(r, t)) for r in readers):
            chosen.add(id(t))
    return inline_stages(outputs, chosen, simplifier=None)


def _with_copy_inlined(reader, copy):
    """``reader`` with ``copy`` substituted, the stages before them left as they are."""
    keep = [t for t in topological_order([reader]) if t is not reader and t is not copy]
    return inline_stages([reader], {id(copy)}, keep=keep, simplifier=None)[0]
