"""A whole program as one kernel: ``lower_program(inputs, outputs)``.

The kernel's arguments are the inputs' buffers (scope ``input``, in the order given),
then the outputs' (scope ``output``); elementwise stages read once are inlined
(:mod:`.inline`), every other stage gets a ``temp`` buffer; stages run in topological
order, each as the loop nest of :mod:`.stage`.

>>> import tegrad as tg
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((4, 3), dtype="float64", name="A")
>>> k = tg.reduce_axis((0, 3), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(tg.exp(A[i, k]), axis=k), name="S")
>>> print(format_kernel(lower_program([A], [S], name="rowsum")))
kernel rowsum(float64 A[4][3], float64 S[4]) {
  for (i = 0; i < 4; i++) {
    S[i] = 0.0;
    for (k = 0; k < 3; k++) {
      S[i] += exp(A[i, k]);
    }
  }
}
"""
from __future__ import annotations

from tegrad.ir.errors import TegradError
from tegrad.ir.graph import topological_order
from tegrad.ir.tensor import PlaceholderOp, Tensor

from tegrad.codegen.loops.mapper import block
from tegrad.codegen.loops.nodes import Buffer, Kernel, Load
from tegrad.codegen.lower.expr import Names, StageContext, widen
from tegrad.codegen.lower.inline import inline_read_once
from tegrad.codegen.lower.stage import copy_loops, lower_stage


def _tensor_list(tensors, what):
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TegradError(f"lower_program: {what} must be tensors, got {t!r}")
    return tensors


def prepare(outputs):
    """The program as it is lowered: elementwise stages read once inlined."""
    return inline_read_once(_tensor_list(outputs, "outputs"))


def lower_program(inputs, outputs, *, name="kernel"):
    """The kernel computing ``outputs`` from ``inputs`` (placeholders), see module doc."""
    inputs = _tensor_list(inputs, "inputs")
    outputs = _tensor_list(outputs, "outputs")
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise TegradError(f"lower_program: input {t.name!r} is not a placeholder")
    if len({id(t) for t in inputs}) != len(inputs):
        raise TegradError("lower_program: an input is given twice")
    prepared = prepare(outputs)
    names = Names()
    buffers, args = {}, []
    for t in inputs:
        buf = Buffer(names.fresh(t.name), t.shape, t.dtype, "input")
        buffers[id(t)] = buf
        args.append(buf)
    out_bufs, copies = [], []
    for t in prepared:
        buf = Buffer(names.fresh(t.name), t.shape, t.dtype, "output")
        out_bufs.append(buf)
        if id(t) in buffers:  # an input, or an output given twice: copy it
            src = buffers[id(t)]
            copies.append(copy_loops(buf, lambda idx, src=src: Load(src, idx, src.dtype),
                                     t.shape, names))
        else:
            buffers[id(t)] = buf
    temps, stmts = [], []
    for t in topological_order(prepared):
        if isinstance(t.op, PlaceholderOp):
            if id(t) not in buffers:
                raise TegradError(f"lower_program: the outputs depend on the placeholder "
                                  f"{t.name!r}, which is not among the inputs")
            continue
        buf = buffers.get(id(t))
        if buf is None:
            buf = Buffer(names.fresh(t.name), t.shape, t.dtype, "temp")
            buffers[id(t)] = buf
            temps.append(buf)
        stmts.append(lower_stage(t, buf, StageContext(buffers, names, t.name)))
    return Kernel(name, tuple(args + out_bufs), tuple(temps), block(stmts + copies))


__all__ = ["lower_program", "prepare", "widen"]
