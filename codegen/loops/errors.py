"""The run-time errors compiled code reports: one table, read by every layer that shows one.

A kernel stops with a status naming a kind of error and a tensor: a :class:`Check` node
failed (a data-dependent index outside its tensor, an integer division by zero), or the
emitter's own check did (an access outside its buffer under ``check_bounds``). Compiled
code allocates nothing, so no kind reports a failed allocation (a matrix product packs
into the kernel's own storage: see ``tegrad.codegen.kernels.packspace``). Each kind has
the exception ``tg.build``'s function raises, the text that exception carries when no
``Check`` supplied one, and the text the C library's ``NAME_error_string`` gives before
the tensor's name. Adding a kind touches
this table only (tests check that every kind the code reports is here).

>>> ERRORS["division_by_zero"].c_text
'integer division by zero in tensor'
>>> type(ERRORS["index_out_of_range"].exception("x")).__name__
'OutOfBoundsError'
"""
from __future__ import annotations

from dataclasses import dataclass

from tegrad.ir.errors import OutOfBoundsError, TegradError


@dataclass(frozen=True)
class ErrorKind:
    """One kind of run-time error: ``exception`` (a ``TegradError`` subclass), the
    ``default`` text (a format string of ``tensor``, used when no ``Check`` node gave a
    message) and ``c_text`` (the C library's text, followed by the tensor's name)."""

    name: str
    exception: type
    default: str
    c_text: str


ERRORS = {e.name: e for e in (
    ErrorKind("index_out_of_range", OutOfBoundsError,
              "{tensor!r}: a data-dependent index is out of bounds (an index read from "
              "data addresses outside the tensor)",
              "index out of range in tensor"),
    ErrorKind("division_by_zero", TegradError,
              "{tensor!r}: integer division or modulo by zero",
              "integer division by zero in tensor"),
)}

#: the kinds a :class:`~tegrad.codegen.loops.nodes.Check` node may report: every kind (the
#: emitter's own bounds checks report ``index_out_of_range`` too)
CHECK_KINDS = tuple(ERRORS)


def status_error(kind, tensor, message=None):
    """The exception a kernel's status ``(kind, tensor, message)`` stands for (the
    message of a ``Check`` node, or None for the emitter's own checks).

    >>> str(status_error("division_by_zero", "d"))
    "'d': integer division or modulo by zero"
    """
    e = ERRORS.get(kind)
    if e is None:
        return TegradError(message or f"{tensor!r}: run-time check {kind!r} failed")
    return e.exception(message or e.default.format(tensor=tensor))


def c_error_text(kind, tensor):
    """What an exported library's ``NAME_error_string`` says for ``kind`` on ``tensor``.

    >>> c_error_text("index_out_of_range", "labels")
    "index out of range in tensor 'labels'"
    """
    e = ERRORS.get(kind)
    return f"{e.c_text if e is not None else kind} {tensor!r}"


__all__ = ["CHECK_KINDS", "ERRORS", "ErrorKind", "c_error_text", "status_error"]
