"""Walks over the tensor DAG.

>>> import tegrad as tg
>>> A = tg.placeholder((2,), name="A")
>>> B = tg.compute((2,), lambda i: A[i] + 1, name="B")
>>> [t.name for t in topological_order([B])]
['A', 'B']
"""
from tegrad.ir.errors import TegradError
from tegrad.ir.stages import is_placeholder
from tegrad.ir.tensor import Tensor


def as_tensor_list(outputs):
    """``outputs`` (a tensor or an iterable of tensors) as a list; TegradError otherwise."""
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, (str, bytes)) or not hasattr(outputs, "__iter__"):
        raise TegradError(f"expected a tensor or a list of tensors, got {outputs!r} of type "
                          f"{type(outputs).__name__}")
    outputs = list(outputs)
    for t in outputs:
        if not isinstance(t, Tensor):
            raise TegradError(f"expected tensors, got {t!r}")
    return outputs


def topological_order(outputs):
    """All tensors the outputs depend on, each after its inputs (iterative DFS)."""
    order, state = [], {}
    for root in as_tensor_list(outputs):
        stack = [(root, False)]
        while stack:
            t, expanded = stack.pop()
            if expanded:
                if state.get(id(t)) != "done":
                    state[id(t)] = "done"
                    order.append(t)
                continue
            if id(t) in state:
                continue
            state[id(t)] = "open"
            stack.append((t, True))
            for inp in reversed(t.op.input_tensors()):
                if id(inp) not in state:
                    stack.append((inp, False))
    return order


def placeholders(outputs):
    """The placeholders the outputs depend on, in topological order."""
    return [t for t in topological_order(outputs) if is_placeholder(t)]
