"""A whole program as one kernel: ``lower_program(inputs, outputs)``.

The kernel's arguments are the inputs' buffers (scope ``input``, in the order given),
then the outputs' (scope ``output``); elementwise stages read once are inlined
(:mod:`.inline`), every other stage gets a ``temp`` buffer; stages run in topological
order, each as the loop nest of :mod:`.stage`, one top-level statement per stage.

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
from tegrad.ir.mapper import tensors_read
from tegrad.ir.stages import StageMapper, is_placeholder, stage_exprs, tuple_group
from tegrad.ir.tensor import Tensor

from tegrad.codegen.kernels.gemm_spec import ELEMENT
from tegrad.codegen.loops.nodes import Block, Buffer, Kernel, Load
from tegrad.codegen.lower.contraction import (contraction_plan, lower_contraction,
                                              runs_as_products)
from tegrad.codegen.lower.expr import Names, StageContext
from tegrad.codegen.lower.inline import inline_read_once, read_through_copies
from tegrad.codegen.lower.residues import drop_residue_masks
from tegrad.codegen.lower.stacked_scatter import place_links_early, split_stacked_scatters
from tegrad.codegen.lower.stage import copy_loops, lower_stage, lower_tuple_reduction


def _tensor_list(tensors, what):
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TegradError(f"lower_program: {what} must be tensors, got {t!r}")
    return tensors


def prepare(outputs, contractions=False, plain=frozenset()):
    """The program as it is lowered: (with ``contractions``) sums masked by residues
    rewritten by zero elimination where they then run on products (:mod:`.residues`),
    elementwise stages read once inlined (with
    ``contractions``, not into a stage that has a gemm plan, and copies read through by
    the products that read them). Stages named in ``plain`` keep their loops."""
    def plan_of(t):
        return None if t.name in plain else contraction_plan(t)

    keep = (lambda t: plan_of(t) is not None) if contractions else None
    prepared = _tensor_list(outputs, "outputs")
    if contractions:
        prepared = drop_residue_masks(prepared, keep)
    prepared = inline_read_once(prepared, keep_inputs_of=keep)
    if contractions:
        prepared = read_through_copies(prepared, lambda t: runs_as_products(plan_of(t)))
    return prepared


def product_dtypes(outputs):
    """The dtypes of the products :func:`lower_program` with ``contractions`` runs for
    ``outputs`` (a stage with a plan that runs as products, found in the program as
    written, before :func:`prepare` rewrites it); the stages are searched in order,
    only until each dtype a product computes in is found.

    >>> import tegrad as tg
    >>> a = tg.placeholder((64, 64), name="a")
    >>> product_dtypes([tg.ops.matmul(a, a) + 1.0])
    ['float32']
    """
    found = []
    for t in topological_order(_tensor_list(outputs, "outputs")):
        if (not is_placeholder(t) and t.dtype in ELEMENT and t.dtype not in found
                and runs_as_products(contraction_plan(t))):
            found.append(t.dtype)
            if len(found) == len(ELEMENT):
                break
    return found


def lower_program(inputs, outputs, *, name="kernel", contractions=False, plain=()):
    """The kernel computing ``outputs`` from ``inputs`` (placeholders), see module doc.

    With ``contractions``, every stage that is a contraction with a gemm plan becomes a
    call of the gemm kernel (:mod:`.contraction`) instead of its loop nest, and a scatter
    into constant slices runs as one scatter per slice, each placed where its values are
    ready (:mod:`.stacked_scatter`), except the stages named in ``plain`` (those an
    expert schedules by hand).
    """
    plain = frozenset(plain)
    inputs = _tensor_list(inputs, "inputs")
    outputs = _tensor_list(outputs, "outputs")
    for t in inputs:
        if not is_placeholder(t):
            raise TegradError(f"lower_program: input {t.name!r} is not a placeholder")
    if len({id(t) for t in inputs}) != len(inputs):
        raise TegradError("lower_program: an input is given twice")
    prepared, links = prepare(outputs, contractions, plain), set()
    if contractions:
        # each slice of a scatter into constant slices runs where its values are ready
        prepared, links = split_stacked_scatters(prepared, keep=lambda t: t.name in plain)
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
    order = place_links_early(topological_order(prepared), links)
    in_place = _accumulated_in_place(order, buffers)
    temps, stmts = [], []
    padded = {}  # zero-padded copies of buffers, made once for every contraction
    def new_temp(base, shape, dtype):
        temps.append(Buffer(names.fresh(base), tuple(shape), dtype, "temp"))
        return temps[-1]

    def buffer_of(t):
        if id(t) not in buffers:
            buffers[id(t)] = Buffer(names.fresh(t.name), t.shape, t.dtype, "temp")
            temps.append(buffers[id(t)])
        return buffers[id(t)]

    for t in reversed(order):
        if id(t) in in_place:
            buffers[id(t.op.init)] = buffer_of(t)
    siblings = _tuple_siblings(order)
    for t in order:
        if is_placeholder(t):
            if id(t) not in buffers:
                raise TegradError(f"lower_program: the outputs depend on the placeholder "
                                  f"{t.name!r}, which is not among the inputs")
            continue
        buf = buffer_of(t)
        ctx = StageContext(buffers, names, t.name)
        found = contraction_plan(t) if contractions and t.name not in plain else None
        if id(t) in siblings:
            group = siblings[id(t)]
            if group[0] is t:  # the others are computed in its nest
                stmts.append(lower_tuple_reduction(group, [buffer_of(s) for s in group], ctx))
        elif found is not None:
            stmts.append(lower_contraction(t, buf, ctx, found, new_temp, padded))
        else:
            stmts.append(lower_stage(t, buf, ctx, fill=id(t) not in in_place))
    temps.sort(key=lambda b: b.name)
    # one top-level statement per stage (schedules find stages there)
    stmts = [s for s in stmts + copies if s is not None]
    return Kernel(name, tuple(args + out_bufs), tuple(temps),
                  stmts[0] if len(stmts) == 1 else Block(tuple(stmts)))


def _tuple_siblings(order):
    """``{id(stage): its group}``: the stages computing components of one reduction of a
    tuple over the same domain, grouped (in ``order``) to be computed in one nest."""
    groups = {}
    for t in order:
        key = tuple_group(t)
        if key is not None:
            groups.setdefault(key, []).append(t)
    return {id(t): group for group in groups.values() for t in group}


def _accumulated_in_place(order, buffers):
    """Ids of the scatter stages that can accumulate into their ``init``'s buffer.

    That is when ``init`` is a computed stage, no argument, read by nothing else: it is
    then computed straight into the scatter's buffer, which needs no copy.
    """
    uses = {}
    for t in order:
        for e in stage_exprs(t):
            for r in tensors_read(e):
                uses[id(r)] = uses.get(id(r), 0) + 2
        init = _INIT(t)
        if init is not None:
            uses[id(init)] = uses.get(id(init), 0) + 1
    out = set()
    for t in order:
        init = _INIT(t)
        if (init is not None and not is_placeholder(init)
                and id(init) not in buffers and uses.get(id(init)) == 1):
            out.add(id(t))
    return out


class _ScatterInit(StageMapper):
    """The tensor a scatter stage starts from (None for no ``init`` or another stage)."""

    def map_placeholder(self, t):
        return None

    map_compute = map_scan = map_placeholder

    def map_scatter(self, t):
        return t.op.init


_INIT = _ScatterInit()


__all__ = ["lower_program", "prepare", "product_dtypes"]
