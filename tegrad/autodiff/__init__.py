"""Reverse-mode differentiation of tensor programs.

``differentiate(output, inputs)`` returns gradient tensors that are ordinary compute
expressions, as reverse mode builds them; ``jacobian(output, input)`` builds a full
Jacobian. :mod:`tegrad.pipeline` composes them with zero elimination (``tg.differentiate``).
The modules, one job each: :mod:`.algebra` (symbolic zero), :mod:`.rules`,
:mod:`.intrinsic_rules` and :mod:`.reduce_rules` (derivative rule tables),
:mod:`.normalize` (normalising the forward program), :mod:`.contribution` (one stage's
contribution to an input's adjoint), :mod:`.reverse` (adjoint accumulation and the API),
:mod:`.result`.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> y = tg.compute((3,), lambda i: tg.exp(x[i]), name="y")
>>> dx, = differentiate(y, [x])
>>> np.allclose(tg.evaluate(dx, {x: np.zeros(3)}), 1.0)
True
"""
from tegrad.autodiff.result import Gradients
from tegrad.autodiff.reverse import differentiate, jacobian

__all__ = ["differentiate", "jacobian", "Gradients"]
