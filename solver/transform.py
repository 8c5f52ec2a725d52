"""A change of variables between two domains with the same parameters.

Convention (the same as TVM's ``src_to_dst`` / ``dst_to_src``):

* ``old_to_new`` maps each **old** variable to an expression over the **new**
  variables (and parameters).  Substitute it into anything written over the
  old domain — e.g. a reduction body — to rewrite it over the new domain:
  :meth:`DomainTransformation.rewrite`.
* ``new_to_old`` maps each **new** variable to an expression over the **old**
  variables (and parameters).  Evaluate it at an old point to get the new
  point: :meth:`DomainTransformation.map_old_point`.

On the integer points of the two domains the maps are inverse bijections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .affine import Affine, AffineLike, lift
from .domain import Domain

__all__ = ["DomainTransformation"]


@dataclass(frozen=True, init=False)
class DomainTransformation:
    """``old`` and ``new`` domains with ``old_to_new`` / ``new_to_old`` maps (see module doc).

    >>> from tegrad.solver.affine import Affine
    >>> old = Domain([("i", 3, 10)])
    >>> new = Domain([("i_s", 0, 7)])
    >>> i, i_s = Affine.var("i"), Affine.var("i_s")
    >>> t = DomainTransformation(old, new, {"i": i_s + 3}, {"i_s": i - 3})
    >>> str(t.rewrite(2 * Affine.var("i")))
    '2*i_s + 6'
    >>> t.map_old_point({"i": 4})
    {'i_s': 1}
    """

    old: Domain
    new: Domain
    old_to_new: dict
    new_to_old: dict

    def __init__(self, old: Domain, new: Domain, old_to_new: Mapping[str, AffineLike],
                 new_to_old: Mapping[str, AffineLike]):
        object.__setattr__(self, "old", old)
        object.__setattr__(self, "new", new)
        object.__setattr__(self, "old_to_new", {k: lift(v) for k, v in old_to_new.items()})
        object.__setattr__(self, "new_to_old", {k: lift(v) for k, v in new_to_old.items()})

    __hash__ = None  # holds dicts

    @staticmethod
    def identity(domain: Domain) -> "DomainTransformation":
        m = {v: Affine.var(v) for v in domain.names}
        return DomainTransformation(domain, domain, m, dict(m))

    @property
    def is_empty(self) -> bool:
        """The new domain was proven to have no points (see simplify_domain)."""
        return self.new.is_trivially_empty

    def rewrite(self, expr: AffineLike) -> Affine:
        """An expression over the old variables, rewritten over the new ones."""
        return lift(expr).substitute(self.old_to_new)

    def map_old_point(self, point: Mapping[str, int]) -> dict:
        """New-domain point of an old-domain point (``point`` also holds parameters)."""
        return {v: e.evaluate(point) for v, e in self.new_to_old.items()}

    def map_new_point(self, point: Mapping[str, int]) -> dict:
        """Old-domain point of a new-domain point (``point`` also holds parameters)."""
        return {v: e.evaluate(point) for v, e in self.old_to_new.items()}

    def compose(self, other: "DomainTransformation") -> "DomainTransformation":
        """``self`` (A -> B) followed by ``other`` (B -> C) gives A -> C.

        >>> d = Domain([("i", 3, 10)])
        >>> t = DomainTransformation(d, Domain([("j", 0, 7)]), {"i": Affine.var("j") + 3},
        ...                          {"j": Affine.var("i") - 3})
        >>> t.compose(t.inverse()).old_to_new
        {'i': Affine('i')}
        """
        old_to_new = {v: e.substitute(other.old_to_new) for v, e in self.old_to_new.items()}
        new_to_old = {v: e.substitute(self.new_to_old) for v, e in other.new_to_old.items()}
        return DomainTransformation(self.old, other.new, old_to_new, new_to_old)

    def check_bijection(self, parameter_values: Mapping[str, int] | None = None,
                        tight: bool = True) -> int:
        """Verify by enumeration that the maps are inverse bijections between the points.

        For small domains (tests, debugging); ``tight=False`` enumerates the old domain
        over its declared ranges (see :meth:`Domain.points`). Returns the number of
        points; raises AssertionError describing the first mismatch.
        """
        params = dict(parameter_values or {})
        old_points = list(self.old.points(params, tight=tight))
        new_points = list(self.new.points(params))
        seen = set()
        for pt in old_points:
            full = {**params, **pt}
            image = self.map_old_point(full)
            if not self.new.contains({**params, **image}):
                raise AssertionError(f"old point {pt} maps to {image}, outside the new domain")
            back = self.map_new_point({**params, **image})
            if back != pt:
                raise AssertionError(f"old point {pt} -> {image} -> {back}")
            seen.add(tuple(sorted(image.items())))
        for pt in new_points:
            if tuple(sorted(pt.items())) not in seen:
                back = self.map_new_point({**params, **pt})
                raise AssertionError(f"new point {pt} (old {back}) has no preimage")
        if len(new_points) != len(old_points):
            raise AssertionError(f"{len(old_points)} old points but {len(new_points)} new points")
        return len(old_points)

    def inverse(self) -> "DomainTransformation":
        return DomainTransformation(self.new, self.old, self.new_to_old, self.old_to_new)

    def __str__(self) -> str:
        def maps(m):
            return ", ".join(f"{k} = {v}" for k, v in m.items()) or "(none)"
        return (f"old: {self.old}\n"
                f"new: {self.new}\n"
                f"old vars: {maps(self.old_to_new)}\n"
                f"new vars: {maps(self.new_to_old)}")
