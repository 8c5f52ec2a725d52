"""What zero elimination did, stage by stage, with the cost before and after.

>>> import tegrad as tg
>>> A = tg.placeholder((3, 4), name="A")
>>> B = tg.placeholder((4, 2), name="B")
>>> k = tg.reduce_axis((0, 4), name="k")
>>> C = tg.compute((3, 2), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> tg.explain(tg.differentiate(C, [A], optimize=False)[0])
dA:
  before zero elimination (iterations=372, flops=648, memory=0):
    dA[i0, i1] = sum(sum(((i == i0 && k == i1) ? 1.0 : 0.0) * B[k, j], k in [0, 4)), i in [0, 3), j in [0, 2))
  after zero elimination (iterations=24, flops=8, memory=4):
    dA_r0[i1] = sum(B[i1, j], j in [0, 2))
    dA[i0, i1] = dA_r0[i1]
"""
from __future__ import annotations

from tegrad.analysis.cost import cost
from tegrad.ir.printer import stage_lines
from tegrad.ir.stages import is_placeholder
from tegrad.zero_elim.program import eliminate_zeros


def _stages(t, keep_ids):
    return stage_lines([t], lambda s: not is_placeholder(s) and id(s) not in keep_ids)


def explain_pair(title, before, after, keep=()):
    """The text comparing two versions of one tensor (stages outside ``keep``)."""
    keep_ids = {id(t) for t in keep}
    lines = [f"{title}:", f"  before zero elimination ({cost(before)}):"]
    lines += [f"    {s}" for s in _stages(before, keep_ids)]
    lines.append(f"  after zero elimination ({cost(after)}):")
    lines += [f"    {s}" for s in _stages(after, keep_ids)]
    return "\n".join(lines)


class Explanation(str):
    """The text of an explanation, which a REPL or a notebook shows as it prints (once,
    without quotes); ``print`` it in a script."""

    def __repr__(self):
        return str(self)

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def explained(text, file):
    """``text`` as an :class:`Explanation`, also written to ``file`` when one is given."""
    if file is not None:
        print(text, file=file)
    return Explanation(text)


def explain(tensor, keep=(), file=None):
    """Zero-eliminate ``tensor``; its stages before and after, as an :class:`Explanation`
    (written to ``file`` too, when given).

    ``keep`` lists stages left as they are and not printed (e.g. the forward program).
    """
    (after,) = eliminate_zeros([tensor], keep=keep)
    return explained(explain_pair(tensor.name, tensor, after, keep), file)
