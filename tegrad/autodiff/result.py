"""The value returned by :func:`tegrad.autodiff.differentiate` (see the class)."""
from __future__ import annotations


class Gradients:
    """The gradients of one differentiation, as reverse mode builds them.

    ``result`` is the list of gradient tensors, in the order of the inputs (the object
    also unpacks, indexes and has a length like that list); ``adjoints`` maps every
    tensor on a path from the inputs to the output (the output included) to its
    adjoint tensor, except a tensor that reads the inputs only through an intrinsic of
    zero derivative (``m = stop_gradient(max_k x)``: its adjoint would feed no gradient); ``inputs``, ``output`` and ``head`` are what was differentiated;
    ``forward`` lists the (normalised) forward stages the gradients read as they are.

    >>> import tegrad as tg
    >>> from tegrad.autodiff import differentiate
    >>> w = tg.placeholder((3,), dtype="float64", name="w")
    >>> y = tg.compute((3,), lambda i: w[i] * w[i], name="y")
    >>> res = differentiate(y, [w])
    >>> (dw,) = res
    >>> len(res), res.adjoints[w] is dw
    (1, True)
    """

    def __init__(self, output, inputs, head, result, adjoints, forward=()):
        self.output = output
        self.inputs = list(inputs)
        self.head = head
        self.result = list(result)
        self.adjoints = adjoints
        self.forward = list(forward)

    def __iter__(self):
        return iter(self.result)

    def __len__(self):
        return len(self.result)

    def __getitem__(self, index):
        return self.result[index]

    def __repr__(self):
        names = ", ".join(t.name for t in self.result)
        return f"{type(self).__name__}(d{self.output.name} -> [{names}])"


__all__ = ["Gradients"]
