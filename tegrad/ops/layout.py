"""Data layout changes such as ``NCHW`` <-> ``NCHW4c`` (Relay's ``layout_transform``).

A layout names each dimension with a letter. An upper-case letter is a primal axis (N,
C, H, W, ...); a number followed by a lower-case letter is a sub-axis of that extent
splitting the primal axis of the same letter: in ``NCHW4c`` the channel ``C_total``
is ``C * 4 + c``. The transform only uses ``//`` and ``%`` by constants.

>>> import tegrad as tg
>>> x = tg.placeholder((1, 8, 2, 2), name="x")
>>> print(tg.format(layout_transform(x, "NCHW", "NCHW4c")).splitlines()[-1])
layout_transform[ax0, ax1, ax2, ax3, ax4] = x[ax0, ax1 * 4 + ax4, ax2, ax3]
"""
from __future__ import annotations

import re

from tegrad.ir import builders as api
from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.expr import Const, select
from tegrad.ir.tensor import compute
from tegrad.ops._common import check_tensor, operator

__all__ = ["layout_transform"]

_TOKEN = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout, what):
    """``[(letter, factor), ...]``: factor None for a primal axis, an int for a sub-axis.

    >>> parse_layout("NCHW4c", "layout")
    [('N', None), ('C', None), ('H', None), ('W', None), ('c', 4)]
    """
    if not isinstance(layout, str) or not layout:
        raise TegradError(f"{what} must be a non-empty layout string such as 'NCHW', got "
                          f"{layout!r}")
    tokens = _TOKEN.findall(layout)
    if "".join(digits + letter for digits, letter in tokens) != layout:
        raise TegradError(f"{what} {layout!r} is not a layout: use letters, each sub-axis "
                          f"preceded by its extent (e.g. 'NCHW4c')")
    axes, seen = [], set()
    for digits, letter in tokens:
        if letter in seen:
            raise TegradError(f"{what} {layout!r} names the axis {letter!r} twice")
        seen.add(letter)
        if letter.isupper():
            if digits:
                raise TegradError(f"{what} {layout!r}: the primal axis {letter!r} cannot have "
                                  f"an extent; sub-axes are lower-case ({digits}"
                                  f"{letter.lower()})")
            axes.append((letter, None))
        else:
            if not digits or int(digits) <= 0:
                raise TegradError(f"{what} {layout!r}: the sub-axis {letter!r} needs a "
                                  f"positive extent before it (e.g. 4{letter})")
            axes.append((letter, int(digits)))
    for letter, factor in axes:
        if factor is not None and letter.upper() not in seen:
            raise TegradError(f"{what} {layout!r}: the sub-axis {letter!r} has no primal "
                              f"axis {letter.upper()!r}")
    return axes


class _Layout:
    """Positions and sub-axis factors of a parsed layout."""

    def __init__(self, layout, what):
        self.text = layout
        self.axes = parse_layout(layout, what)
        self.pos = {letter: d for d, (letter, _) in enumerate(self.axes)}
        self.primals = sorted(letter for letter, factor in self.axes if factor is None)

    def factor(self, primal):
        """The extent of ``primal``'s sub-axis, 1 when it has none."""
        sub = self.pos.get(primal.lower())
        return 1 if sub is None else self.axes[sub][1]

    def total(self, primal, index):
        """The position along the whole primal axis: ``P * factor + p``."""
        outer = index[self.pos[primal]]
        sub = self.pos.get(primal.lower())
        if sub is None:
            return outer
        return outer * self.factor(primal) + index[sub]


@operator
def layout_transform(x, src_layout, dst_layout):
    """Re-arrange ``x`` from ``src_layout`` to ``dst_layout`` (e.g. "NCHW" -> "NCHW4c").

    For each primal axis ``P`` of total extent ``T_P`` (its extent in ``x`` times its
    sub-axis factor in ``src_layout``) and the output index, ``t_P = P * f_dst + p``
    (or ``P`` without a sub-axis) is the position along the whole axis, and::

        out[...] = x[..., t_P // f_src, ..., t_P % f_src, ...]

    The output extent of ``P`` is ``ceil(T_P / f_dst)``; when ``f_dst`` does not divide
    ``T_P`` the tail is padded with zeros (``t_P < T_P ? x[...] : 0``), as TVM does.
    Both layouts need the same primal axes, ``src_layout`` one letter per dimension of
    ``x``, and ``x``'s sub-axis extents must equal their factors.
    """
    check_tensor(x)
    src = _Layout(src_layout, "src_layout")
    dst = _Layout(dst_layout, "dst_layout")
    if len(src.axes) != x.ndim:
        raise ShapeError(f"src_layout {src_layout!r} has {len(src.axes)} axes but tensor "
                         f"{x.name!r} has shape {x.shape}")
    if src.primals != dst.primals:
        raise TegradError(f"src_layout {src_layout!r} and dst_layout {dst_layout!r} do not "
                          f"have the same primal (upper-case) axes")
    for d, (letter, factor) in enumerate(src.axes):
        if factor is not None and x.shape[d] != factor:
            raise ShapeError(f"dimension {d} of tensor {x.name!r} of shape {x.shape} is the "
                             f"sub-axis {factor}{letter} of {src_layout!r} but has extent "
                             f"{x.shape[d]}")
    totals = {p: x.shape[src.pos[p]] * src.factor(p) for p in src.primals}
    shape = tuple(factor if factor is not None else -(-totals[letter] // dst.factor(letter))
                  for letter, factor in dst.axes)
    padded = [p for p in dst.primals if totals[p] % dst.factor(p)]

    def fcompute(*index):
        read = [None] * x.ndim
        inside = []
        for p in src.primals:
            t = dst.total(p, index)
            f = src.factor(p)
            read[src.pos[p]] = t if f == 1 else t // f
            if f != 1:
                read[src.pos[p.lower()]] = t % f
            if p in padded:
                inside.append(t < totals[p])
        element = x[tuple(read)]
        if not inside:
            return element
        return select(api.all(*inside), element, Const(0, x.dtype))

    return compute(shape, fcompute, name="layout_transform")
