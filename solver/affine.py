"""Immutable integer term language: affine expressions with floor-div/mod atoms.

Design
------
An :class:`Affine` is ``sum(coefficient * atom) + constant`` with Python-int
coefficients.  An *atom* is either

* a variable name (``str``), or
* a :class:`FloorDiv` ``(expr // divisor)`` or :class:`Mod` ``(expr % divisor)``
  of an inner :class:`Affine` by a positive integer constant.

So a quasi-affine expression such as ``2*((2*i + k) // 3) + (i + 1) % 4 - 1`` is
an ordinary ``Affine`` whose terms happen to include division atoms, and the
tegrad side can convert ``(i*2 + k) // 3`` both ways by just using the Python
operators ``//`` and ``%`` on Affines.  :attr:`Affine.is_linear` tells whether an
expression has no division atoms.  Semantics are Python's: ``//`` rounds toward
minus infinity and ``%`` is in ``[0, divisor)`` (the same as isl's ``floor``
and ``mod``).

All objects are frozen dataclasses with structural equality and hashing.  Terms
are kept sorted so that equal-looking expressions compare equal; divisions are
lightly canonicalised (multiples of the divisor are pulled out, common factors
cancelled), which is not a full normal form for quasi-affine expressions.

>>> x, y = Affine.var("x"), Affine.var("y")
>>> str(2*x + y - 3)
'2*x + y - 3'
>>> str((2*x + 7) // 2)
'x + 3'
>>> str((x + 1) % 4)
'(x + 1) % 4'
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from math import gcd
from typing import Iterable, Mapping, Union

__all__ = ["Affine", "FloorDiv", "Mod", "Atom", "AffineLike", "expand_divisions", "lift",
           "parse_affine"]


@dataclass(frozen=True)
class FloorDiv:
    """The atom ``expr // divisor`` (floor division, ``divisor > 0``).

    Build it through ``affine // c`` (which canonicalises) rather than directly.
    """

    expr: "Affine"
    divisor: int
    sort_key: tuple = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "sort_key", (1, str(self)))

    def __str__(self) -> str:
        return f"{self.expr._operand_str()} // {self.divisor}"

    def variables(self) -> frozenset:
        return self.expr.variables()

    def evaluate(self, values: Mapping[str, int]) -> int:
        return self.expr.evaluate(values) // self.divisor

    def rebuild(self, expr: "Affine") -> "Affine":
        return expr // self.divisor


@dataclass(frozen=True)
class Mod:
    """The atom ``expr % divisor`` (value in ``[0, divisor)``, ``divisor > 0``).

    Build it through ``affine % c`` (which canonicalises) rather than directly.
    """

    expr: "Affine"
    divisor: int
    sort_key: tuple = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "sort_key", (2, str(self)))

    def __str__(self) -> str:
        return f"{self.expr._operand_str()} % {self.divisor}"

    def variables(self) -> frozenset:
        return self.expr.variables()

    def evaluate(self, values: Mapping[str, int]) -> int:
        return self.expr.evaluate(values) % self.divisor

    def rebuild(self, expr: "Affine") -> "Affine":
        return expr % self.divisor


Atom = Union[str, FloorDiv, Mod]
AffineLike = Union["Affine", int, str]


def _key(atom: Atom) -> tuple:
    return (0, atom) if type(atom) is str else atom.sort_key


@dataclass(frozen=True, init=False)
class Affine:
    """``sum(coefficient * atom) + constant`` over Python ints (see module doc).

    ``Affine({"x": 2, "y": 1}, -3)`` is ``2*x + y - 3``.  Multiplying two
    non-constant Affines raises ``ValueError``.

    >>> e = Affine({"x": 2, "y": 1}, -3)
    >>> e.coeff("x"), e.constant, sorted(e.variables())
    (2, -3, ['x', 'y'])
    >>> str(e.substitute({"y": Affine.var("x") + 1}))
    '3*x - 2'
    >>> e.evaluate({"x": 4, "y": 1})
    6
    """

    terms: tuple  # ((atom, coefficient), ...) sorted by atom, no zero coefficient
    constant: int

    def __init__(self, terms: Mapping[Atom, int] | Iterable = (), constant: int = 0):
        items = terms.items() if isinstance(terms, Mapping) else terms
        merged: dict = {}
        for atom, c in items:
            if not isinstance(c, int):
                raise TypeError(f"coefficient of {atom} must be an int, got {c!r}")
            merged[atom] = merged.get(atom, 0) + c
        if not isinstance(constant, int):
            raise TypeError(f"constant must be an int, got {constant!r}")
        object.__setattr__(self, "terms", _sorted_terms(merged))
        object.__setattr__(self, "constant", int(constant))

    # -- construction --------------------------------------------------
    @staticmethod
    def _raw(merged: dict, constant: int) -> "Affine":
        # Internal fast path: `merged` is owned by us and may hold zeros.
        obj = object.__new__(Affine)
        object.__setattr__(obj, "terms", _sorted_terms(merged))
        object.__setattr__(obj, "constant", constant)
        return obj

    @staticmethod
    def var(name: str) -> "Affine":
        """The expression consisting of the single variable ``name``."""
        return Affine._raw({name: 1}, 0)

    @staticmethod
    def const(value: int) -> "Affine":
        """The constant expression ``value``."""
        return Affine._raw({}, int(value))

    # -- inspection ------------------------------------------------------
    def as_dict(self) -> dict:
        """A fresh ``{atom: coefficient}`` dict (constant not included)."""
        return dict(self.terms)

    def coeff(self, atom: Atom) -> int:
        """Coefficient of a variable name (or of any atom); 0 when absent."""
        for a, c in self.terms:
            if a == atom:
                return c
        return 0

    def variables(self) -> frozenset:
        """All variable names, including those inside division atoms."""
        out = set()
        for a, _ in self.terms:
            if type(a) is str:
                out.add(a)
            else:
                out |= a.variables()
        return frozenset(out)

    def atoms(self) -> tuple:
        """The top-level division atoms (``FloorDiv`` / ``Mod``)."""
        return tuple(a for a, _ in self.terms if type(a) is not str)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    @property
    def is_linear(self) -> bool:
        """True when there is no division atom (a plain affine expression)."""
        return all(type(a) is str for a, _ in self.terms)

    # -- arithmetic ------------------------------------------------------
    def __add__(self, other: AffineLike) -> "Affine":
        if isinstance(other, int):
            if not other:
                return self
            obj = object.__new__(Affine)
            object.__setattr__(obj, "terms", self.terms)
            object.__setattr__(obj, "constant", self.constant + other)
            return obj
        other = lift(other)
        merged = dict(self.terms)
        for a, c in other.terms:
            merged[a] = merged.get(a, 0) + c
        return Affine._raw(merged, self.constant + other.constant)

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        return Affine._raw({a: -c for a, c in self.terms}, -self.constant)

    def __sub__(self, other: AffineLike) -> "Affine":
        return self + (-lift(other))

    def __rsub__(self, other: AffineLike) -> "Affine":
        return lift(other) + (-self)

    def __mul__(self, other: AffineLike) -> "Affine":
        if isinstance(other, Affine):
            if other.is_constant:
                other = other.constant
            elif self.is_constant:
                return other * self.constant
            else:
                raise ValueError(f"product of non-constant expressions ({self}) * ({other})")
        if isinstance(other, str):
            return Affine.var(other) * self
        if not isinstance(other, int):
            return NotImplemented
        if other == 0:
            return Affine._raw({}, 0)
        return Affine._raw({a: c * other for a, c in self.terms}, self.constant * other)

    __rmul__ = __mul__

    def __floordiv__(self, divisor: int) -> "Affine":
        return _floordiv(self, _check_divisor(divisor))

    def __mod__(self, divisor: int) -> "Affine":
        return _mod(self, _check_divisor(divisor))

    # -- substitution / evaluation ----------------------------------------
    def substitute(self, mapping: Mapping[str, AffineLike]) -> "Affine":
        """Replace variables (also inside division atoms) by expressions."""
        if not mapping:
            return self
        merged: dict = {}
        constant = self.constant
        changed = False
        for a, c in self.terms:
            if type(a) is str:
                rep = mapping.get(a)
                if rep is None:
                    merged[a] = merged.get(a, 0) + c
                    continue
                rep = lift(rep)
            else:
                inner = a.expr.substitute(mapping)
                if inner is a.expr:
                    merged[a] = merged.get(a, 0) + c
                    continue
                rep = a.rebuild(inner)
            changed = True
            for b, d in rep.terms:
                merged[b] = merged.get(b, 0) + c * d
            constant += c * rep.constant
        return Affine._raw(merged, constant) if changed else self

    def replace_atoms(self, table: Mapping[Atom, "Affine"]) -> "Affine":
        """Replace whole atoms (e.g. a ``FloorDiv``) by expressions, innermost first."""
        merged: dict = {}
        constant = self.constant
        for a, c in self.terms:
            if type(a) is not str:
                inner = a.expr.replace_atoms(table)
                if inner is not a.expr:
                    rebuilt = a.rebuild(inner).replace_atoms(table)
                    for b, d in rebuilt.terms:
                        merged[b] = merged.get(b, 0) + c * d
                    constant += c * rebuilt.constant
                    continue
            rep = table.get(a)
            if rep is None:
                merged[a] = merged.get(a, 0) + c
            else:
                for b, d in rep.terms:
                    merged[b] = merged.get(b, 0) + c * d
                constant += c * rep.constant
        out = Affine._raw(merged, constant)
        return self if out == self else out

    def evaluate(self, values: Mapping[str, int]) -> int:
        """Integer value under ``values``; a missing variable raises KeyError."""
        total = self.constant
        for a, c in self.terms:
            total += c * (values[a] if type(a) is str else a.evaluate(values))
        return total

    # -- printing --------------------------------------------------------
    def __str__(self) -> str:
        # Valid Python: a division atom with coefficient +-1 needs no
        # parentheses inside a sum (// binds tighter than + and -), except
        # when negated at the front, where -a // b would mean (-a) // b.
        parts = []
        for a, c in self.terms:
            mag = abs(c)
            if type(a) is str:
                body = a if mag == 1 else f"{mag}*{a}"
            else:
                body = str(a) if mag == 1 else f"{mag}*({a})"
            if not parts:
                if c > 0:
                    parts.append(body)
                else:
                    parts.append(f"-({body})" if type(a) is not str and mag == 1 else f"-{body}")
            else:
                parts.append(("+ " if c > 0 else "- ") + body)
        if not parts:
            return str(self.constant)
        if self.constant:
            parts.append(("+ " if self.constant > 0 else "- ") + str(abs(self.constant)))
        return " ".join(parts)

    def _operand_str(self) -> str:
        # How the expression looks as the left operand of // or %.
        if len(self.terms) == 1 and not self.constant and self.terms[0][1] == 1 \
                and type(self.terms[0][0]) is str:
            return self.terms[0][0]
        if not self.terms and self.constant >= 0:
            return str(self.constant)
        return f"({self})"

    def __repr__(self) -> str:
        return f"Affine({str(self)!r})"


def _sorted_terms(merged: dict) -> tuple:
    items = [(a, c) for a, c in merged.items() if c]
    if len(items) > 1:
        items.sort(key=lambda item: _key(item[0]))
    return tuple(items)


def _check_divisor(divisor) -> int:
    if isinstance(divisor, Affine) and divisor.is_constant:
        divisor = divisor.constant
    if not isinstance(divisor, int) or divisor <= 0:
        raise ValueError(f"division only by a positive integer constant, got {divisor!r}")
    return divisor


def lift(value: AffineLike) -> Affine:
    """Turn an int, a variable name or an Affine into an Affine."""
    if isinstance(value, Affine):
        return value
    if isinstance(value, bool):
        raise TypeError("booleans are not integer expressions")
    if isinstance(value, int):
        return Affine._raw({}, value)
    if isinstance(value, str):
        return Affine._raw({value: 1}, 0)
    raise TypeError(f"cannot use {value!r} as an integer expression")


def _split(expr: Affine, c: int):
    """Split ``expr`` into (multiple-of-c part / c, remainder terms, constant)."""
    whole: dict = {}
    rest: dict = {}
    for a, k in expr.terms:
        if k % c == 0:
            whole[a] = k // c
        else:
            rest[a] = k
    return whole, rest


def _floordiv(expr: Affine, c: int) -> Affine:
    if c == 1:
        return expr
    # floor((c*w + r + c*qc + rc) / c) == w + qc + floor((r + rc) / c)
    whole, rest = _split(expr, c)
    qc, rc = divmod(expr.constant, c)
    if not rest:
        return Affine._raw(whole, qc)
    g = gcd(c, *rest.values())
    if g > 1:
        # floor((g*r' + rc) / (g*c')) == floor((r' + rc // g) / c') for integer r'
        rest = {a: k // g for a, k in rest.items()}
        c //= g
        rc //= g
    atom = FloorDiv(Affine._raw(rest, rc), c)
    whole[atom] = whole.get(atom, 0) + 1
    return Affine._raw(whole, qc)


def _mod(expr: Affine, c: int) -> Affine:
    if c == 1:
        return Affine._raw({}, 0)
    _, rest = _split(expr, c)
    rc = expr.constant % c
    if not rest:
        return Affine._raw({}, rc)
    g = gcd(c, *rest.values())
    if g > 1:
        # (g*r' + rc) % (g*c') == g*((r' + rc // g) % c') + rc % g
        inner = Affine._raw({a: k // g for a, k in rest.items()}, rc // g)
        return Affine._raw({Mod(inner, c // g): g}, rc % g)
    return Affine._raw({Mod(Affine._raw(rest, rc), c): 1}, 0)


def expand_divisions(expr: AffineLike) -> Affine:
    """``expr`` with every ``x % m`` written ``x - m*(x // m)`` and every division of a
    division merged, ``(x // a + y) // c == (x + a*y) // (a*c)`` (``y`` an integer
    expression, ``a, c > 0``), so that divisions which cancel vanish: the row-major
    offset of an unravelled index comes out affine. The value is unchanged.

    >>> k = Affine.var("k")
    >>> str(expand_divisions(676 * (k // 676) + 26 * ((k // 26) % 26) + k % 26))
    'k'
    >>> str(expand_divisions((k // 4) % 3))
    '-3*(k // 12) + k // 4'
    """
    expr = lift(expr)
    if expr.is_linear:
        return expr
    merged: dict = {}
    constant = expr.constant
    for atom, c in expr.terms:
        if type(atom) is str:
            merged[atom] = merged.get(atom, 0) + c
            continue
        inner = expand_divisions(atom.expr)
        quotient = _merged_floordiv(inner, atom.divisor)
        rep = quotient if type(atom) is FloorDiv else inner - atom.divisor * quotient
        for b, d in rep.terms:
            merged[b] = merged.get(b, 0) + c * d
        constant += c * rep.constant
    return Affine._raw(merged, constant)


def _merged_floordiv(x: Affine, c: int) -> Affine:
    """``x // c`` for an ``x`` without ``Mod`` atoms, one inner division merged into it."""
    divisions = [(a, k) for a, k in x.terms if type(a) is FloorDiv]
    if len(divisions) != 1 or divisions[0][1] != 1:
        return x // c
    atom = divisions[0][0]
    rest = x - Affine._raw({atom: 1}, 0)
    # x == atom.expr // a + rest with rest integer, so x // c == (atom.expr + a*rest) // (a*c)
    return _merged_floordiv(atom.expr + atom.divisor * rest, atom.divisor * c)


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
           ast.Mod: lambda a, b: a % b}


def parse_affine(text: str) -> Affine:
    """Parse Python-syntax integer expressions such as ``"2*x + (i + 1) % 4"``.

    >>> str(parse_affine("(i*2 + k) // 3 - 1"))
    '(2*i + k) // 3 - 1'
    """
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) \
                and not isinstance(node.value, bool):
            return Affine.const(node.value)
        if isinstance(node, ast.Name):
            return Affine.var(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"not a quasi-affine integer expression: {text!r}")

    return walk(ast.parse(text, mode="eval"))
