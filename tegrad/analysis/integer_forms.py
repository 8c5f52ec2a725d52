"""A combine mapper over integer index arithmetic: abstract values of integer expressions.

Affine forms (:mod:`.affine`) and value ranges (:mod:`.intervals`) interpret the same
nodes (constants, variables, ``-``, casts between integers, ``+ - * min max``, and
``//``/``%`` by a positive constant) in different domains; :class:`IntegerForm` walks
the expression once, bottom-up and without recursion, and asks a subclass for each
operation. Anything else (a read, a float, a division by a variable) has no form: None.
"""
from __future__ import annotations

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Const
from tegrad.ir.mapper import CombineMapper


def _no_form(self, e, *children):
    return None


class IntegerForm(CombineMapper):
    """Subclasses give ``const(value)``, ``var(name)``, ``neg(a)``, ``binary(op, a, b)``
    (None when the form has no rule) and ``divide(op, a, c)`` for ``//``/``%`` by ``c > 0``.
    """

    def map_const(self, e):
        return self.const(e.value) if _dt.is_int(e.dtype) else None

    def map_var(self, e):
        return self.var(e.name) if _dt.is_int(e.dtype) else None

    def map_neg(self, e, a):
        return None if a is None or not _dt.is_int(e.dtype) else self.neg(a)

    def map_cast(self, e, a):
        return a if _dt.is_int(e.dtype) and _dt.is_int(e.a.dtype) else None

    def map_binary(self, e, a, b):
        if a is None or not _dt.is_int(e.dtype):
            return None
        if e.op in ("floordiv", "floormod"):
            if type(e.b) is not Const or e.b.value <= 0:
                return None
            return self.divide(e.op, a, e.b.value)
        return None if b is None else self.binary(e.op, a, b)

    map_compare = map_and = map_or = map_not = map_select = map_call = map_read = \
        map_reduce = _no_form


__all__ = ["IntegerForm"]
