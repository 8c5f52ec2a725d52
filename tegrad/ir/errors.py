"""The exception hierarchy of tegrad.

Every error a user can provoke is a :class:`TegradError`; the subclasses also derive
from the matching builtin (``TypeError``, ``ValueError``, ``IndexError``) so that code
catching the builtin keeps working.
"""


class TegradError(Exception):
    """Base class of every error raised by tegrad for bad input or unsupported programs."""


class DTypeError(TegradError, TypeError):
    """Operands of incompatible dtypes, or a dtype that an operation does not accept."""


class ShapeError(TegradError, ValueError):
    """A shape that is not a tuple of positive integers, or shapes that do not agree."""


class IndexingError(TegradError, TypeError):
    """A tensor read with the wrong number of indices or a non-integer index."""


class ScopeError(TegradError, ValueError):
    """A variable used where it is not bound, e.g. a reduce axis outside its reduction."""


class FeedError(TegradError, ValueError):
    """A missing feed, or a feed with the wrong shape or dtype."""


class OutOfBoundsError(TegradError, IndexError):
    """A tensor read (or scatter) outside the tensor's shape during evaluation."""


class BufferTooLargeError(TegradError, MemoryError):
    """A buffer (a stage's output or temporary) needs more bytes than the machine's
    physical memory, so it is refused before anything is allocated."""


class ImmutableError(TegradError, AttributeError):
    """An assignment to an attribute of a tensor or stage, which are immutable."""


class DifferentiationError(TegradError):
    """A node or operation that cannot be differentiated."""
