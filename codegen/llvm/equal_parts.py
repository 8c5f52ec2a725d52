"""Statements equal but for the names of their buffers and variables: the parts of a
kernel that can run as one LLVM function.

A model stacking equal blocks (the layers of a transformer) lowers every block to the
same loops over other buffers. :func:`part_key` gives a statement's structure with its
buffers and variables renamed in the order they are first met (a buffer keeping its
shape, dtype and scope); two statements with equal keys emit the same code given their
buffers in :func:`part_key`'s order, so the kernel's module holds the function once
and calls it per block (LLVM's time is about linear in the code it is given).

Everything else is compared as it is: a check's tensor names, constants (floats by
their bits, so ``0.0`` and ``-0.0`` differ), a product's spec.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
>>> def copy(src, dst, var):
...     i = Var(var, "int64")
...     return For(i, Const(0, "int64"), Const(4, "int64"),
...                Store(Buffer(dst, (4,), "float32"), (i,),
...                      Load(Buffer(src, (4,), "float32"), (i,)) * 2.0))
>>> (k0, order), (k1, _) = part_key(copy("a", "b", "i")), part_key(copy("c", "d", "j"))
>>> k0 == k1, [b.name for b in order]
(True, ['b', 'a'])
>>> part_key(copy("a", "a", "i"))[0] == k0  # one buffer read and written: another part
False
"""
from __future__ import annotations

from tegrad.ir.expr import Node, Var
from tegrad.codegen.loops.nodes import Buffer


def part_key(stmt):
    """``(key, buffers)``: ``stmt``'s structure with buffers and variables numbered in
    the order first met (a hashable key; equal for statements equal but for those
    names) and its buffers in that order."""
    buffers, variables = {}, {}
    ids = {}      # id(node) -> its number in ``table``
    table = {}    # a node's renamed fields -> its number
    stack = [(stmt, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in ids:
            continue
        t = type(node)
        if t is Buffer:
            # (a buffer is its name and type, as the printed kernel names it)
            seen = (node.name, node.shape, node.dtype, node.scope)
            if seen not in buffers:
                buffers[seen] = (len(buffers), node)
            ids[id(node)] = ("buffer", buffers[seen][0], node.shape, node.dtype, node.scope)
            continue
        if t is Var:
            number = variables.setdefault(node.name, len(variables))
            ids[id(node)] = ("var", number, node.dtype)
            continue
        values = node.children_values()
        if not expanded:
            # fields in order, so names are numbered as a walk in field order meets them
            stack.append((node, True))
            stack.extend((v, False) for v in reversed(_nodes_in(values)))
            continue
        fields = (t.__name__,) + tuple(_field_key(v, ids) for v in values)
        ids[id(node)] = table.setdefault(fields, len(table))
    top = ids[id(stmt)]
    return (top, tuple(sorted(table.items(), key=lambda kv: kv[1]))), \
        [node for _, node in buffers.values()]


def _nodes_in(values):
    """The nodes among ``values`` (in tuples too), in order."""
    out = []
    for v in values:
        if isinstance(v, Node):
            out.append(v)
        elif type(v) is tuple:
            out.extend(_nodes_in(v))
    return out


def _field_key(v, ids):
    """A field's value in a key: a node by its number, a float by its bits."""
    if isinstance(v, Node):
        return ids[id(v)]
    if type(v) is tuple:
        return ("tuple",) + tuple(_field_key(x, ids) for x in v)
    if isinstance(v, float):
        return ("float", v.hex())
    return (type(v).__name__, v)


__all__ = ["part_key"]
