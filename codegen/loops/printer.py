"""Readable pseudo-C for the loop IR (what ``f.loops`` shows).

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Kernel, Load, Store
>>> A, B = Buffer("A", (4,), "float32", "input"), Buffer("B", (4,), "float32", "output")
>>> i = Var("i", "int64")
>>> body = For(i, Const(0, "int64"), Const(4, "int64"), Store(B, (i,), Load(A, (i,)) * 2.0))
>>> print(format_kernel(Kernel("double", (A, B), (), body)))
kernel double(float32 A[4], float32 B[4]) {
  for (i = 0; i < 4; i++) {
    B[i] = A[i] * 2.0;
  }
}
"""
from __future__ import annotations

from tegrad.ir.printer import ATOM, ExprText

from tegrad.codegen.loops.mapper import LOAD_CHILDREN
from tegrad.codegen.loops.nodes import (TEXT, Accumulate, Allocate, Block, Check, For, If, Kernel,
                                        Let, Load, MatrixProduct, Store)

_INDENT = "  "


class ExprPrinter(ExprText):
    """tegrad's expression printer, extended with loads (``A[i, j]``)."""

    _method_names = {Load: "map_load"}
    children_of = LOAD_CHILDREN

    def map_load(self, e, *indices):
        if not indices:
            return e.buffer.name, ATOM
        parts = []
        for k, i in enumerate(indices):
            parts += [", ", i[0]] if k else [i[0]]
        return (e.buffer.name, "[", tuple(parts), "]"), ATOM


def format_expr(e):
    """The text of an expression that may contain loads.

    >>> from tegrad.ir.expr import Var
    >>> from tegrad.codegen.loops.nodes import Buffer, Load
    >>> A = Buffer("A", (4, 4), "float32", "input")
    >>> i = Var("i", "int64")
    >>> format_expr(Load(A, (i, i + 1)) * 2.0)
    'A[i, i + 1] * 2.0'
    """
    return ExprPrinter().text(e)


def _decl(buf):
    dims = "".join(f"[{d}]" for d in buf.shape)
    return f"{buf.dtype} {buf.name}{dims}"


def _access(p, buf, indices):
    return f"{buf.name}[{', '.join(p.text(i) for i in indices)}]" if indices else buf.name


def _stage_note(s):
    """A write's note naming the stage it computes in another buffer's memory."""
    return f"  // {s.stage}" if s.stage else ""


def _lines(s, p, depth, out):
    pad = _INDENT * depth
    t = type(s)
    if t is Block:
        for c in s.stmts:
            _lines(c, p, depth, out)
    elif t is For:
        v = p.text(s.var)
        inc = f"{v}++" if s.step == 1 else f"{v} += {s.step}"
        kind = "" if s.kind == "serial" else f"{s.kind} "
        out.append(f"{pad}{kind}for ({v} = {p.text(s.begin)}; {v} < {p.text(s.end)}; {inc}) {{")
        _lines(s.body, p, depth + 1, out)
        out.append(f"{pad}}}")
    elif t is If:
        out.append(f"{pad}if ({p.text(s.cond)}) {{")
        _lines(s.then, p, depth + 1, out)
        if s.otherwise is not None:
            out.append(f"{pad}}} else {{" + ("  // rarely taken" if s.likely else ""))
            _lines(s.otherwise, p, depth + 1, out)
        out.append(f"{pad}}}")
    elif t is Store:
        out.append(f"{pad}{_access(p, s.buffer, s.indices)} = {p.text(s.value)};"
                   + _stage_note(s))
    elif t is Accumulate:
        op = {"sum": "+=", "prod": "*=", "max": "max=", "min": "min="}.get(
            s.reducer.name, f"{s.reducer.name}=")
        out.append(f"{pad}{_access(p, s.buffer, s.indices)} {op} {p.text(s.value)};"
                   + _stage_note(s))
    elif t is Let:
        out.append(f"{pad}{s.var.dtype} {p.text(s.var)} = {p.text(s.value)};")
        _lines(s.body, p, depth, out)
    elif t is Allocate:
        out.append(f"{pad}local {_decl(s.buffer)};")
        _lines(s.body, p, depth, out)
    elif t is Check:
        where = "".join(f", {n!r}" for n in (s.indexed, s.stage) if n)
        out.append(f"{pad}check({p.text(s.cond)}, {s.error}, {s.tensor!r}{where});")
    elif t is MatrixProduct:
        out.append(f"{pad}{format_matrix_product(s)};" + _stage_note(s))
    else:
        raise TypeError(f"cannot print the statement {s!r}")


def format_matrix_product(s):
    """One line: the product's operands (buffer + element offset), extents and strides.

    >>> from tegrad.codegen.kernels.gemm import GemmSpec
    >>> from tegrad.codegen.loops.nodes import Buffer
    >>> A, B = Buffer("A", (2, 3), "float32", "input"), Buffer("B", (3, 4), "float32", "input")
    >>> C = Buffer("C", (2, 4), "float32", "output")
    >>> format_matrix_product(MatrixProduct(GemmSpec.dense("float32", 2, 4, 3), C, A, B))
    'C = gemm(A, B; batch 1, m 2, n 4, k 3; strides A (6, 3, 1), B (12, 4, 1), C (8, 4, 1))'
    """
    spec = s.spec

    def at(buf, off):
        return buf.name if not off else f"{buf.name} + {off}"

    def tables():
        parts = []
        if spec.k_offsets is not None:
            parts.append(f"k offsets [{len(spec.k_offsets)}]")
        if getattr(spec, "n_offsets", None) is not None:
            parts.append(f"n offsets [{len(spec.n_offsets)}]")
        if spec.batch_offsets is not None:
            parts.append(f"batch offsets [{len(spec.batch_offsets)}]")
        return "; " + ", ".join(parts) if parts else ""

    assign = "+=" if spec.accumulate else "="
    return (f"{at(s.c, s.c_offset)} {assign} gemm({at(s.a, s.a_offset)}, {at(s.b, s.b_offset)}; "
            f"batch {spec.batch}, m {spec.m}, n {spec.n}, k {spec.k}; strides "
            f"A {spec.a_strides}, B {spec.b_strides}, C {spec.c_strides}{tables()})")


def format_stmt(s, depth=0):
    """Pseudo-C of one statement, indented by ``depth`` levels."""
    out = []
    _lines(s, ExprPrinter(), depth, out)
    return "\n".join(out)


def format_kernel(k):
    """Pseudo-C of a kernel: its signature, its temporaries, its body."""
    if type(k) is not Kernel:
        return format_stmt(k)
    out = [f"kernel {k.name}({', '.join(_decl(b) for b in k.args)}) {{"]
    for buf in k.temps:
        out.append(f"{_INDENT}temp {_decl(buf)};")
    _lines(k.body, ExprPrinter(), 1, out)
    out.append("}")
    return "\n".join(out)


TEXT.update(expr=format_expr)
