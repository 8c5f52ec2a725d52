"""The value returned by :func:`tegrad.differentiate` (see the class for an example)."""
from __future__ import annotations


class DifferentiationResult:
    """The gradients of one differentiation.

    ``result`` is the list of gradient tensors, in the order of the inputs (the object
    also unpacks, indexes and has a length like that list); ``adjoints`` maps every
    tensor on a path from the inputs to the output (the output included) to its
    adjoint tensor; ``inputs``, ``output`` and ``head`` are what was differentiated.

    >>> import tegrad as tg
    >>> w = tg.placeholder((3,), dtype="float64", name="w")
    >>> y = tg.compute((3,), lambda i: w[i] * w[i], name="y")
    >>> res = tg.differentiate(y, [w])
    >>> (dw,) = res
    >>> len(res), res.adjoints[w] is dw
    (1, True)
    """

    def __init__(self, output, inputs, head, result, adjoints, forward=(), naive=None):
        self.output = output
        self.inputs = list(inputs)
        self.head = head
        self.result = list(result)
        self.adjoints = adjoints
        #: the (normalised) forward stages the gradients read as they are
        self.forward = list(forward)
        #: the result before zero elimination (None when this is the naive result)
        self.naive = naive

    def optimized(self):
        """The same gradients with zeros eliminated from every adjoint stage."""
        from tegrad.zero_elim.program import eliminate_zeros
        keys = list(self.adjoints)
        tensors = self.result + [self.adjoints[k] for k in keys]
        new = eliminate_zeros(tensors, keep=self.forward)
        n = len(self.result)
        adjoints = dict(zip(keys, new[n:]))
        return DifferentiationResult(self.output, self.inputs, self.head, new[:n], adjoints,
                                     self.forward, naive=self)

    def explain(self, file=None):
        """Print (and return) each gradient before and after zero elimination, with costs."""
        from tegrad.zero_elim.explain import explain_pair
        naive = self.naive if self.naive is not None else self
        after = self if self.naive is not None else self.optimized()
        texts = [explain_pair(f"d{self.output.name}/d{inp.name}", before, opt, self.forward)
                 for inp, before, opt in zip(self.inputs, naive.result, after.result)]
        text = "\n".join(texts)
        print(text, file=file)
        return text

    def __iter__(self):
        return iter(self.result)

    def __len__(self):
        return len(self.result)

    def __getitem__(self, index):
        return self.result[index]

    def __repr__(self):
        names = ", ".join(t.name for t in self.result)
        return f"DifferentiationResult(d{self.output.name} -> [{names}])"


__all__ = ["DifferentiationResult"]
