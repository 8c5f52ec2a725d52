"""A scatter into disjoint slices runs as one scatter per slice, each where its values are ready.

Reverse mode writes the adjoint of a stacked tensor read one slice at a time (a
recurrent network's input projection ``gi[t]``, read at step ``t``) as one scatter whose
targets each pin the stacked axis to a constant::

    dgi = 0;  for (b, j):  dgi[0, b, j] += v0(b, j);  dgi[1, b, j] += v1(b, j);  ...

where ``v_t`` reads the adjoints of step ``t``. Lowered as it stands, that is one loop
nest after the whole backward pass, recomputing every step's values from memory, its
body too large to vectorise. Split into a chain of scatters, one per constant (a
*slice*), each accumulating into the buffer of the one before::

    dgi_0 = 0;  dgi_0[c0, b, j] += v_c0(b, j)
    dgi_1 = dgi_0;  dgi_1[c1, b, j] += v_c1(b, j)   ...

each link can run as soon as its slice's values are computed, beside (and fused with)
the loops that computed them (:func:`place_links_early`).

Identity preserved: every element is written by the targets of one slice only (their
indices differ at the pinned position), in the same order as before (a link keeps its
slice's targets in the scatter's order and iterates the scatter's whole domain in the
same loop order), after the same ``init``; so each element receives the same terms in
the same order, and ``split_stacked_scatters(outputs)[k]`` computes ``outputs[k]``
bit for bit.
"""
from __future__ import annotations

from tegrad.ir.expr import Const
from tegrad.ir.graph import topological_order
from tegrad.ir.rewrite import rewrite_program
from tegrad.ir.tensor import ScatterOp, scatter_stage
from tegrad.ir.mapper import tensors_read

from tegrad.codegen.tuning import MAX_SCATTER_SLICES


def _slices(op):
    """The targets of the scatter ``op`` grouped by the constant they pin one index
    position to (``[(constant, [targets in order])]`` in order of first target), for the
    position that gives the most groups; None when no position pins every target to a
    constant or the constants are all equal."""
    best = None
    for pos in range(len(op.targets[0].indices)):
        keys = [t.indices[pos] for t in op.targets]
        if not all(type(k) is Const for k in keys):
            continue
        groups = {}
        for k, target in zip(keys, op.targets):
            groups.setdefault(k.value, []).append(target)
        if len(groups) > 1 and (best is None or len(groups) > len(best)):
            best = groups
    return None if best is None else list(best.items())


def _closure_size(targets):
    """The number of stages the values of ``targets`` depend on (how far into the
    program their slice becomes ready)."""
    read = {}
    for target in targets:
        for e in target.exprs():
            for t in tensors_read(e):
                read.setdefault(id(t), t)
    return len(topological_order(list(read.values()))) if read else 0


def _split(t, links):
    op = t.op
    if type(op) is not ScatterOp:
        return t
    slices = _slices(op)
    if slices is None or len(slices) > MAX_SCATTER_SLICES:
        return t
    ready = [_closure_size(targets) for _, targets in slices]
    if len(set(ready)) == 1:
        return t  # every slice is ready at the same point: nothing to place earlier
    # the link of the slice ready first comes first (sorted is stable: ties keep the
    # scatter's order)
    order = sorted(range(len(slices)), key=lambda k: ready[k])
    init = op.init
    for n, k in enumerate(order):
        name = op.name if n == len(order) - 1 else f"{op.name}_slice{n}"
        init = scatter_stage(name, t.shape, op.axes, slices[k][1], init)
        links.add(id(init))
    return init


def split_stacked_scatters(outputs, keep=lambda t: False):
    """``(outputs with every scatter into two or more constant slices split into a chain
    of per-slice scatters, {ids of the chains' links})`` (module doc); stages for which
    ``keep`` holds are not split (a schedule names them).

    >>> import tegrad as tg
    >>> x = tg.placeholder((2, 3), name="x")
    >>> h0 = tg.compute((3,), lambda j: tg.tanh(x[0, j]), name="h0")
    >>> h1 = tg.compute((3,), lambda j: tg.tanh(h0[j] + x[1, j]), name="h1")
    >>> dx = tg.differentiate(tg.ops.sum(h1), [x])[0]   # dx[0, j] += ...; dx[1, j] += ...
    >>> [new], links = split_stacked_scatters([dx])
    >>> new.name, new.op.init.name, len(links)
    ('dx', 'dx_slice0', 2)
    """
    links = set()
    mapping = rewrite_program(list(outputs), lambda t: t if keep(t) else _split(t, links))
    return [mapping[id(t)] for t in outputs], links


def place_links_early(order, links):
    """``order`` (a topological order) with each link of a split scatter moved up to just
    after the last stage it reads (its slice's values, the link before it): a link is
    read only by the next link (the last one by the scatter's readers, which stay after
    it), so the order stays topological."""
    if not links:
        return order
    placed = [t for t in order if id(t) not in links]
    position = {id(t): k for k, t in enumerate(placed)}
    for t in order:
        if id(t) not in links:
            continue
        at = max((position[id(r)] for r in t.op.input_tensors() if id(r) in position),
                 default=-1) + 1
        placed.insert(at, t)
        position = {id(s): k for k, s in enumerate(placed)}
    return placed


__all__ = ["place_links_early", "split_stacked_scatters"]
