"""Stages that compute the same values, computed once.

A gradient often recomputes what the forward pass computed (softmax's row maximum and
row sum of exponentials), sometimes in another form: the forward program keeps
``m[i] = stop_gradient(max_k x[i, k])`` in one stage, the gradient splits it into
``r[i] = max_k x[i, k]`` and ``m'[i] = stop_gradient(r[i])``. :func:`computed_once`

1. substitutes a reduction stage read once, by an elementwise stage reading nothing
   else, at exactly the reader's own indices (``r[i]`` in ``m'[i]``), into its reader: ``m'[i]`` is then
   ``stop_gradient(max_k x[i, k])``, the same values computed in the same place;
2. replaces every compute stage whose axes, dtype and body (its reads retargeted first)
   equal an earlier stage's by that stage: equal expressions over equal tensors give
   equal values;
3. computes apart a reduction inside a larger body that another stage computes whole
   (``dense[i, j] = sum_k x[i, k] * w[j, k] + b[j]`` and the gradient's
   ``dense_red0[i, j] = sum_k x[i, k] * w[j, k]``): the body reads a stage holding the
   reduction over its own axes, which step 2 then merges with the other (one matrix
   product instead of two). Only reductions reached through arithmetic are taken (one
   under a select or a logical operator may not be evaluated everywhere), in a body that
   reads something besides them (a body of reductions alone is step 1's to match).
   Every such reduction is computed apart as its stage is met, before steps 1 and 2 look
   for an equal stage, so that merges that make later stages equal (a gradient's copies
   of a batch norm, a ReLU and the next convolution; of a recurrent network's steps)
   all happen in one pass; a part no other stage came to share is substituted back at
   the end, so a stage is split only where that saves a computation.

The outputs keep their own stages; ``computed_once(outputs)[k]`` computes the values of
``outputs[k]``.

>>> import tegrad as tg
>>> x = tg.placeholder((3, 4), name="x")
>>> k1, k2 = tg.reduce_axis((0, 4), name="k"), tg.reduce_axis((0, 4), name="k")
>>> a = tg.compute((3,), lambda i: -tg.max(x[i, k1], axis=k1), name="a")
>>> r = tg.compute((3,), lambda i: tg.max(x[i, k2], axis=k2), name="r")
>>> b = tg.compute((3,), lambda i: -r[i], name="a")
>>> y = tg.compute((3, 4), lambda i, j: x[i, j] * a[i] + b[i], name="y")
>>> print(tg.format(computed_once([y])))
x = placeholder((3, 4), float32)
a[i] = -max(x[i, k], k in [0, 4))
y[i, j] = x[i, j] * a[i] + a[i]
"""
from __future__ import annotations

from tegrad.ir.expr import REDUCTIONS, Binary, Call, Cast, Neg, Read, Reduce, Var, structural_equal
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import IdentityMapper, children, walk
from tegrad.ir.stages import compute_body, is_placeholder
from tegrad.ir.rewrite import retarget_ids
from tegrad.ir.tensor import compute
from tegrad.zero_elim.inline import inline_reads


def _wrapped_reduction(t):
    """The reduction stage ``t`` (elementwise, reading nothing else) reads at exactly its
    own indices, or None."""
    body = compute_body(t)
    if body is None:
        return None
    nodes = list(walk(body))
    reads = [n for n in nodes if type(n) is Read]
    if len(reads) != 1 or any(type(n) in REDUCTIONS for n in nodes):
        return None
    read = reads[0]
    inner = compute_body(read.tensor)
    if inner is None or type(inner) is not Reduce:
        return None
    axes = [ax.var.name for ax in t.op.axes]
    if len(axes) != len(read.indices) or not all(
            type(i) is Var and i.name == a for i, a in zip(read.indices, axes)):
        return None
    return read.tensor


def _key(t):
    body = compute_body(t)
    if body is None:
        return None
    axes = tuple((ax.var.name, ax.extent) for ax in t.op.axes)
    return (t.shape, t.dtype, axes, body)


class _Seen:
    """The stages recorded so far, by key."""

    def __init__(self):
        self.by_hash = {}

    def find(self, t):
        key = _key(t)
        if key is None:
            return None
        return next((s for k, s in self.by_hash.get(hash(key), ()) if _equal(k, key)), None)

    def add(self, t):
        key = _key(t)
        if key is not None:
            self.by_hash.setdefault(hash(key), []).append((key, t))


def _top_reductions(body):
    """The reductions of ``body`` reached through arithmetic alone (not inside another
    reduction, a select or a logical operator), in a fixed order."""
    out, stack = [], [body]
    while stack:
        e = stack.pop()
        if type(e) is Reduce:
            out.append(e)
        elif type(e) in (Binary, Neg, Cast, Call):
            stack.extend(reversed(children(e)))
    return out


def _reads_outside_reductions(body):
    """Whether ``body`` reads a tensor outside its reductions (``dense``'s bias)."""
    stack = [body]
    while stack:
        e = stack.pop()
        if type(e) is Read:
            return True
        if type(e) is not Reduce:
            stack.extend(children(e))
    return False


def _splittable(t):
    """Whether step 3 computes apart ``t``'s top reductions: a body that reads something
    besides them (a body of reductions alone is step 1's)."""
    body = compute_body(t)
    return (body is not None and type(body) is not Reduce
            and _reads_outside_reductions(body) and bool(_top_reductions(body)))


class _ReplaceNodes(IdentityMapper):
    """Replaces the very nodes of ``table`` (id -> new node)."""

    def __init__(self, table):
        self.table = table

    def finish(self, e, out):
        return self.table.get(id(e), out)


class _InlineParts(IdentityMapper):
    """Reads of the parts in ``parts`` (id -> part) replaced by the parts' bodies (a
    part is read at its own axes, which are its reader's: the body as it is)."""

    def __init__(self, parts):
        self.parts = parts

    def finish(self, e, out):
        if type(out) is Read and id(out.tensor) in self.parts:
            return compute_body(out.tensor)
        return out


def _split(t, seen, parts):
    """``t`` reading, for its top reductions, stages that compute them over its
    axes (found among ``seen`` or new, added to it and to ``parts``)."""
    body = compute_body(t)
    tops = _top_reductions(body)
    names = [ax.var.name for ax in t.op.axes]
    table = {}
    for r in tops:
        part = compute(t.shape, lambda *axes, r=r: r, name=f"{t.name}_red",
                       axis_names=names)
        same = seen.find(part)
        if same is None:
            seen.add(part)
            parts[id(part)] = same = part
        table[id(r)] = Read(same, tuple(ax.var for ax in t.op.axes), same.dtype)
    new_body = _ReplaceNodes(table)(body)
    return compute(t.shape, lambda *axes: new_body, name=t.name, axis_names=names)


def _unshared_parts_inlined(outputs, parts):
    """``outputs`` with the parts of step 3 that one stage alone reads (no other stage
    computed them) substituted back into it, as it was written."""
    order = topological_order(outputs)
    readers = {}
    for t in order:
        for r in t.op.input_tensors() if not is_placeholder(t) else ():
            if id(r) in parts:
                readers.setdefault(id(r), set()).add(id(t))
    lone = {p for p, who in readers.items() if len(who) == 1}
    if not lone:
        return outputs
    # the parts are retargeted like any stage (what they read may have changed), and
    # their reader reads the retargeted part
    retargeted = {}
    inline = _InlineParts(retargeted)
    mapping = {}
    for t in order:
        if is_placeholder(t):
            mapping[id(t)] = t
            continue
        new = retarget_ids(t, mapping)
        if id(t) in lone:
            retargeted[id(new)] = new
        elif any(id(r) in retargeted for r in new.op.input_tensors()):
            names = [ax.var.name for ax in new.op.axes]
            body = inline(compute_body(new))
            new = compute(new.shape, lambda *axes, body=body: body, name=new.name,
                          axis_names=names)
        mapping[id(t)] = new
    return [mapping[id(t)] for t in outputs]


def computed_once(outputs):
    """``outputs`` with stages computing the same values merged (module doc).

    One pass in topological order, each stage retargeted to the merged stages it reads:
    step 3 computes apart every top reduction of a body that reads something besides
    them, before steps 1 and 2 look for an equal stage, so that a chain of merges (a
    training step's copies of a recurrent network's steps, of a batch norm feeding the
    next convolution) resolves in this one pass; the parts no other stage shares are
    substituted back at the end.
    """
    outputs = list(outputs)
    wanted = {id(t) for t in outputs}
    mapping, seen, parts = {}, _Seen(), {}
    for t in topological_order(outputs):
        if is_placeholder(t):
            mapping[id(t)] = t
            continue
        new = retarget_ids(t, mapping)
        if _splittable(new):
            new = _split(new, seen, parts)
        if id(t) not in wanted:
            same = seen.find(new)
            inner = _wrapped_reduction(new) if same is None else None
            if inner is not None:
                same = seen.find(inline_reads(new, [inner]))
            if same is not None:
                mapping[id(t)] = same
                continue
        seen.add(new)
        mapping[id(t)] = new
    return _unshared_parts_inlined([mapping[id(t)] for t in outputs], parts)


def _equal(a, b):
    return (a[:2] == b[:2] and len(a[2]) == len(b[2])
            and all(n == m and structural_equal(x, y) for (n, x), (m, y) in zip(a[2], b[2]))
            and structural_equal(a[3], b[3]))


__all__ = ["computed_once"]
