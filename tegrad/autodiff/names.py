"""Fresh variable names, renamed axes and building stages with chosen axis names.

Gradient stages introduce variables (the adjoint's axes, the consumer's axes turned into
reduce axes, copies ``k_1`` of reduce axes); every new name is picked with
:func:`tegrad.mapper.fresh_name` against all names of the expressions involved.

>>> from tegrad.ir.expr import Var
>>> fresh_names(["i", "j"], {"i"})
['i_1', 'j']
"""
from __future__ import annotations

from tegrad.ir.expr import Reduce, TupleReduce
from tegrad.ir.mapper import all_var_names, fresh_name, rename_axes, substitute
from tegrad.ir.tensor import compute


def fresh_names(bases, taken):
    """One fresh name per base, distinct from ``taken`` and from each other."""
    taken = set(taken)
    out = []
    for base in bases:
        name = fresh_name(base, taken)
        taken.add(name)
        out.append(name)
    return out


def names_in(*exprs):
    """All variable names (bound or free) in the expressions (None is skipped)."""
    out = set()
    for e in exprs:
        if e is not None:
            out |= all_var_names(e)
    return out


def rename_reduce(e, taken):
    """``e`` (a Reduce or TupleReduce) with its axes renamed away from ``taken``."""
    axes, mapping = rename_axes(e.axes, taken | names_in(e))
    where = None if e.where is None else substitute(e.where, mapping)
    if type(e) is TupleReduce:
        return TupleReduce(e.reducer, tuple(substitute(c, mapping) for c in e.sources), axes,
                           where, e.index, e.dtype)
    source = substitute(e.source, mapping)
    return Reduce(e.reducer, source, axes, where, e.init, e.dtype)


def make_compute(name, shape, axis_names, body_fn):
    """A compute stage whose axes have the given names; ``body_fn(*axis_vars)`` -> body.

    >>> import tegrad as tg
    >>> T = make_compute("T", (2,), ["q"], lambda q: q * 2)
    >>> T.op.axes[0].name
    'q'
    """
    return compute(tuple(shape), lambda *axes: body_fn(*[ax.var for ax in axes]), name=name,
                   axis_names=list(axis_names))


__all__ = ["fresh_names", "names_in", "rename_axes", "rename_reduce", "make_compute"]
