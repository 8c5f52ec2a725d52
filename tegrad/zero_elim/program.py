"""Zero elimination over a whole gradient program.

>>> import tegrad as tg
>>> A = tg.placeholder((3, 4), name="A")
>>> H = tg.placeholder((3, 4), name="H")
>>> y0, y1 = tg.reduce_axis((0, 3), name="y0"), tg.reduce_axis((0, 4), name="y1")
>>> one, zero = tg.const(1.0), tg.const(0.0)
>>> dA = tg.compute((3, 4), lambda a, b: tg.sum(
...     H[y0, y1] * tg.if_then_else(tg.all(y0 == a, y1 == b), one, zero), axis=[y0, y1]),
...     name="dA")
>>> [str(t.op.body) for t in eliminate_zeros([dA])]
['H[a, b]']
"""
from __future__ import annotations

from tegrad.ir.rewrite import rewrite_program
from tegrad.zero_elim.inline import inline_elementwise
from tegrad.zero_elim.stage import optimize_stage
from tegrad.zero_elim.support import Supports


def eliminate_zeros(tensors, *, keep=()):
    """The tensors with every stage they depend on zero-eliminated, except ``keep``.

    ``keep`` is typically the forward program, whose stages the gradient reads as they
    are. Elementwise intermediate stages are then computed inline by their readers.
    Returns a list parallel to ``tensors``; each result computes the same values.
    """
    tensors = list(tensors)
    # each stage sums only where the gradient stages it reads can be nonzero
    supports = Supports()
    mapping = rewrite_program(tensors, lambda t: optimize_stage(t, supports), skip=keep)
    return inline_elementwise([mapping[id(t)] for t in tensors], keep)
