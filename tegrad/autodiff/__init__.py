"""Reverse-mode differentiation of tensor programs.

``differentiate(output, inputs)`` returns gradient tensors that are ordinary compute
expressions; ``jacobian(output, input)`` builds a full Jacobian. The modules, one job
each: :mod:`.algebra` (symbolic zero), :mod:`.rules` and :mod:`.reduce_rules`
(derivative rule tables; intrinsic rules live in :mod:`tegrad.intrinsics`),
:mod:`.hoist` (normalising the forward program), :mod:`.jacobian` (one stage's
contribution to an input's adjoint), :mod:`.reverse` (adjoint accumulation and the
API), :mod:`.result`.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> y = tg.compute((3,), lambda i: tg.exp(x[i]), name="y")
>>> dx, = tg.differentiate(y, [x])
>>> np.allclose(tg.evaluate(dx, {x: np.zeros(3)}), 1.0)
True
"""
from tegrad.autodiff.result import DifferentiationResult
from tegrad.autodiff.reverse import differentiate, jacobian

__all__ = ["differentiate", "jacobian", "DifferentiationResult"]
