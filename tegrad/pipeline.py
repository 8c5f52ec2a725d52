"""Differentiation composed with zero elimination: ``tg.differentiate`` and ``tg.jacobian``.

:mod:`tegrad.autodiff` builds gradients as reverse mode gives them; this module hands
them to :mod:`tegrad.zero_elim`, so autodiff does not depend on the optimiser.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((4,), dtype="float64", name="x")
>>> k = tg.reduce_axis((0, 4), name="k")
>>> L = tg.compute((), lambda: tg.sum(x[k] * x[k], axis=k), name="L")
>>> res = differentiate(L, [x])
>>> tg.evaluate(res[0], {x: np.arange(4.0)}).tolist()
[0.0, 2.0, 4.0, 6.0]
>>> tg.cost(res[0]).iterations < tg.cost(res.naive[0]).iterations
True
"""
from __future__ import annotations

from tegrad import autodiff
from tegrad.autodiff.result import Gradients
from tegrad.autodiff.reverse import jacobian_program
from tegrad.ir.tensor import Tensor
from tegrad.codegen.runtime.builder import request_product_routines
from tegrad.zero_elim.explain import explain_pair, explained
from tegrad.zero_elim.program import eliminate_zeros


class DifferentiationResult(Gradients):
    """The gradients of :func:`differentiate` (see :class:`tegrad.autodiff.result.Gradients`).

    ``naive`` is the result before zero elimination (None when this is the naive one).
    """

    def __init__(self, output, inputs, head, result, adjoints, forward=(), naive=None):
        super().__init__(output, inputs, head, result, adjoints, forward)
        self.naive = naive

    @classmethod
    def of(cls, gradients):
        """The (naive) result holding ``gradients``."""
        g = gradients
        return cls(g.output, g.inputs, g.head, g.result, g.adjoints, g.forward)

    def optimized(self):
        """The same gradients with zeros eliminated from every adjoint stage."""
        keys = list(self.adjoints)
        tensors = self.result + [self.adjoints[k] for k in keys]
        new = eliminate_zeros(tensors, keep=self.forward)
        n = len(self.result)
        adjoints = dict(zip(keys, new[n:]))
        return DifferentiationResult(self.output, self.inputs, self.head, new[:n], adjoints,
                                     self.forward, naive=self)

    def explain(self, file=None):
        """Each gradient before and after zero elimination, with costs, as text that a
        REPL or notebook shows once (``print`` it in a script; ``file``: also written
        there)."""
        naive = self.naive if self.naive is not None else self
        after = self if self.naive is not None else self.optimized()
        texts = [explain_pair(f"d{self.output.name}/d{inp.name}", before, opt, self.forward)
                 for inp, before, opt in zip(self.inputs, naive.result, after.result)]
        return explained("\n".join(texts), file)


def differentiate(output, inputs=None, *, head=None, manual=None, optimize=True):
    """Reverse-mode gradients of ``output`` with respect to ``inputs`` (``tg.differentiate``).

    ``head``, ``inputs`` and ``manual`` are those of :func:`tegrad.autodiff.differentiate`.
    With ``optimize`` (the default) every adjoint is zero-eliminated
    (:mod:`tegrad.zero_elim`), so its loops are those of a hand-written gradient;
    ``optimize=False`` keeps the naive adjoints, and ``res.explain()`` shows both.
    Returns a :class:`DifferentiationResult`. When the program holds matrix products,
    the routines that compute them compiled start compiling on a background thread
    (once per process and dtype), so that a build of the gradients finds them ready.
    """
    if isinstance(output, Tensor):
        request_product_routines([output])
    naive = DifferentiationResult.of(
        autodiff.differentiate(output, inputs, head=head, manual=manual))
    return naive.optimized() if optimize else naive


def jacobian(output, input, *, optimize=True):
    """The full Jacobian ``J[y..., x...] = d output[y] / d input[x]`` (``tg.jacobian``).

    See :func:`tegrad.autodiff.jacobian`; with ``optimize`` (the default) it is
    zero-eliminated like a gradient.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((2,), dtype="float64", name="x")
    >>> y = tg.compute((3,), lambda i: x[0] * tg.cast(i, "float64"), name="y")
    >>> tg.evaluate(jacobian(y, x), {x: np.zeros(2)}).tolist()
    [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]
    """
    grad, forward = jacobian_program(output, input)
    if optimize:
        (grad,) = eliminate_zeros([grad], keep=forward)
    return grad


__all__ = ["DifferentiationResult", "differentiate", "jacobian"]
