"""Canonical form of index arithmetic: reads and integer comparisons.

After substitution an index can read ``x[(a + 1) - 1]``; rewriting every quasi-affine
index and integer comparison through :class:`solver.Affine` gives ``x[a]`` and decides
comparisons that became constant.

>>> import tegrad as tg
>>> from tegrad.ir.expr import Var
>>> x = tg.placeholder((8,), name="x")
>>> str(normalize_indices(x[(Var("a") + 1) * 2 - 2]))
'x[a * 2]'
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Const, Read
from tegrad.ir.mapper import IdentityMapper
from tegrad.analysis.affine import from_affine, from_constraint, to_affine, to_constraint


class IndexNormalizer(IdentityMapper):
    def map_read(self, e, *args):
        new = []
        for i in e.indices:
            aff = to_affine(i)
            new.append(self(i) if aff is None else _same_or(i, from_affine(aff, i.dtype)))
        if all(x is y for x, y in zip(new, e.indices)):
            return e
        return Read(e.tensor, tuple(new), e.dtype)

    def map_compare(self, e, *args):
        if _dt.is_int(e.a.dtype):
            con = to_constraint(e)
            if con is not None:
                con = con.normalized()
                if con.truth is not None:
                    return Const(bool(con.truth), "bool")
                return _same_or(e, from_constraint(con))
        return super().map_compare(e)


def _same_or(old, new):
    """Keep the old node when the canonical one is structurally the same."""
    return old if bool(old == new) else new


def normalize_indices(e):
    """``e`` with canonical index expressions (see the module docstring)."""
    return IndexNormalizer()(e)
