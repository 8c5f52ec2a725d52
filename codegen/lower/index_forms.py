"""Index expressions of a rewritten stage written in simpler, equivalent forms.

:class:`CanonicalIndices` writes every affine index of a read in canonical form (what
:func:`~tegrad.analysis.affine.from_affine` makes of it), and :class:`ExactDivisions`
removes divisions that are exact (``(2 * q + 1) // 2`` is ``q``): after a substitution
(a reduction variable moved, an axis split by residue class) the indices are affine
again, as a contraction's must be.

>>> from tegrad.ir.expr import Var
>>> q = Var("q", "int64")
>>> str(ExactDivisions()((q * 2 + 1) // 2)), str(ExactDivisions()((q * 2 + 1) % 2))
('q', '1')
"""
from __future__ import annotations

from tegrad import solver
from tegrad.analysis.affine import from_affine, to_affine
from tegrad.ir.expr import Binary, Const, Read, Var
from tegrad.ir.mapper import IdentityMapper


class CanonicalIndices(IdentityMapper):
    """Reads with affine indices written in canonical form (``i2 - yy + 1``)."""

    def finish(self, e, out):
        if type(out) is not Read:
            return out
        indices = []
        for i in out.indices:
            aff = to_affine(i)
            indices.append(i if aff is None else from_affine(aff, i.dtype))
        return Read(out.tensor, tuple(indices), out.dtype)


class ExactDivisions(IdentityMapper):
    """``(d * e + c) // d`` as ``e + c // d`` and ``(d * e + c) % d`` as ``c % d`` (``d``
    a positive constant dividing every coefficient: floor division's identity); with
    ``small`` (variable name -> ``d`` for variables known to lie in ``[0, d)``), also
    ``(d * e + f) // d`` as ``e`` and ``(d * e + f) % d`` as ``f``."""

    def __init__(self, small=None):
        self.small = small or {}

    def finish(self, e, out):
        if type(out) is not Binary or out.op not in ("floordiv", "floormod") \
                or type(out.b) is not Const or not isinstance(out.b.value, int) \
                or out.b.value < 1:
            return out
        d = out.b.value
        aff = to_affine(out.a)
        if aff is None or not aff.is_linear:
            return out
        rest = [n for n, c in aff.as_dict().items() if c % d]
        if len(rest) == 1 and aff.as_dict()[rest[0]] == 1 and aff.constant == 0 \
                and self.small.get(rest[0]) == d:
            f = rest[0]
            if out.op == "floormod":
                return Var(f, out.dtype)
            aff = aff - solver.Affine.var(f)
        elif rest:
            return out
        if out.op == "floormod":
            return Const(aff.constant % d, out.dtype)
        quotient = solver.Affine.const(aff.constant // d)
        for name, c in aff.as_dict().items():
            quotient = quotient + solver.Affine.var(name) * (c // d)
        return from_affine(quotient, out.dtype)
