"""Which loops marked ``vectorized`` LLVM vectorised, read from the optimised IR.

The emitter forces every marked loop through LLVM's loop vectoriser under a loop id
naming it, ``tegrad.vector.<n>`` (:func:`~tegrad.codegen.kernels.irutil.forced_vectorisation`;
``n`` numbers the marked loops of the kernel in pre-order, :func:`vector_marked`).
Verified on LLVM 22: a loop it vectorised (and its scalar remainder and vector epilogue)
keeps the name and has ``llvm.loop.isvectorized`` instead of
``llvm.loop.vectorize.enable``; one it could not vectorise keeps
``llvm.loop.vectorize.enable true`` (and LLVM prints why on stderr). A loop whose
iterations LLVM flattened into straight-line code is no loop any more: its id is gone,
so it is not reported. That happens when its trip count fits one vector (the vector loop
of a single iteration is removed; 8 iterations of float32 on AVX2) or is 2 (peeled; the
two iterations then run as one SLP vector operation where they can).

>>> import tegrad as tg
>>> x = tg.placeholder((4, 64), name="x")
>>> y = tg.compute((4, 64), lambda i, j: x[i, j] * 2.0, name="y")
>>> f = tg.build([x], [y], threads=1)
>>> [(n, s.var.name) for n, s in enumerate(vector_marked(f.kernel.body))]
[(0, 'j')]
>>> unvectorised_loops(f.kernel, f.llvm_ir)
[]
"""
from __future__ import annotations

import re
from typing import NamedTuple

from tegrad.codegen.kernels.irutil import VECTOR_MARK
from tegrad.codegen.llvm.emitter import vector_marked
from tegrad.codegen.llvm.statements import first_target

_NODE = re.compile(r"^!(\d+) = (?:distinct )?!\{(.*)\}$", re.M)
_CALL = re.compile(r"\bcall\b[^@]*@\"?([^\"(]+)\"?\(")
_LABEL = re.compile(r"^([-\w.$]+):", re.M)


class UnvectorisedLoop(NamedTuple):
    """A marked loop LLVM did not vectorise: its ``number`` (:func:`vector_marked`), the
    ``loop`` (its loop-IR node), the ``stage`` it computes (the first buffer its body
    writes) and the ``reason`` the optimised IR shows (or a general one)."""

    number: int
    loop: object
    stage: str
    reason: str


def _loop_ids(optimised_ir):
    """``{loop id: (marked loop's number, vectorised?)}`` of the marked loops' loop ids
    in ``optimised_ir``."""
    nodes = {int(k): [o.strip() for o in body.split(",")]
             for k, body in _NODE.findall(optimised_ir)}
    names, done = {}, set()
    for k, ops in nodes.items():
        if len(ops) == 1 and ops[0].startswith(f'!"{VECTOR_MARK}'):
            names[f"!{k}"] = int(ops[0][len(VECTOR_MARK) + 2:-1])
        elif ops and ops[0] == '!"llvm.loop.isvectorized"':
            done.add(f"!{k}")
    out = {}
    for k, ops in nodes.items():
        if ops and ops[0] == f"!{k}":
            number = next((names[o] for o in ops[1:] if o in names), None)
            if number is not None:
                out[k] = (number, any(o in done for o in ops[1:]))
    return out


def _reason(optimised_ir, loop_id):
    """Why the loop whose back edge carries ``!llvm.loop !loop_id`` was not vectorised, as
    far as its blocks show (from its header, the back edge's target, to the back edge):
    a call of a function LLVM has no vector form for, or an exit of the kernel (a check
    failing stops it), else LLVM's general word."""
    lines = optimised_ir.splitlines()
    back = next((k for k, line in enumerate(lines)
                 if line.rstrip().endswith(f"!llvm.loop !{loop_id}")), None)
    if back is not None:
        targets = re.findall(r"label %([-\w.$\"]+)", lines[back])
        start = back
        while start > 0 and not lines[start].startswith("define"):
            label = _LABEL.match(lines[start])
            if label and label.group(1) in targets:
                break
            start -= 1
        body = "\n".join(lines[start:back + 1])
        calls = sorted({c for c in _CALL.findall(body) if not c.startswith("llvm.")})
        if calls:
            return (f"it calls {', '.join(calls)}, which LLVM has no vector form for")
        if re.search(r"^\s*ret i32 [1-9]", body, re.M) or "label %fail" in body:
            return "it can stop the kernel (a check: an index read from memory, a divisor " \
                   "that may be zero, or bounds checking)"
    return "LLVM's loop vectoriser found it not legal to vectorise (its remark on stderr " \
           "says why)"


def unvectorised_loops(kernel, optimised_ir):
    """The loops of ``kernel`` marked ``vectorized`` that LLVM did not vectorise in
    ``optimised_ir`` (the kernel's module after optimisation, e.g.
    ``LoadedModule.optimised_ir``), as :class:`UnvectorisedLoop` s in the order of their
    numbers (module doc). Every emitted copy of a marked loop (one per iteration of an
    unrolled loop around it) must be vectorised for it to count as vectorised."""
    marked = vector_marked(kernel.body)
    first = {}
    for k, (number, vectorised) in sorted(_loop_ids(optimised_ir).items()):
        if not vectorised and number < len(marked) and number not in first:
            first[number] = k
    return [UnvectorisedLoop(n, marked[n], first_target(marked[n]) or kernel.name,
                             _reason(optimised_ir, first[n])) for n in sorted(first)]


__all__ = ["UnvectorisedLoop", "unvectorised_loops", "vector_marked"]
