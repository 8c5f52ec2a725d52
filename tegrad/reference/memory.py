"""The memory limit of the reference evaluator.

The evaluator refuses, before computing anything, a stage whose buffers (its output and
the temporaries of one chunk: index arrays, broadcast operands, masks) would need more
bytes than the limit, with a :class:`TegradError` naming the stage and its size, instead
of running for a long time into a ``MemoryError``. The limit is, by default,
:data:`DEFAULT_FRACTION` of the memory available when the check is made (``MemAvailable``
in ``/proc/meminfo``, else the free physical pages from ``os.sysconf``);
:func:`set_memory_limit` sets it for the process and ``tg.evaluate(...,
memory_limit=...)`` for one call.

>>> import tegrad as tg
>>> previous = tg.set_memory_limit(10**6)
>>> y = tg.compute((1000, 1000), lambda i, j: tg.cast(i * j, "float32"), name="y")
>>> tg.evaluate(y, {})
Traceback (most recent call last):
...
tegrad.ir.errors.TegradError: stage 'y' (shape (1000, 1000), 1000000 points) needs about 4.0 MB to evaluate (its output buffer), more than the memory limit of 1.0 MB; raise it with tg.set_memory_limit(bytes) or tg.evaluate(..., memory_limit=bytes)
>>> _ = tg.set_memory_limit(previous)
"""
from __future__ import annotations

import os

from tegrad.ir.errors import TegradError

#: the fraction of the available memory one stage may use when no limit is set
DEFAULT_FRACTION = 0.5
#: bytes per element of a temporary (index arrays are int64; values at most 8 bytes)
TEMPORARY_ITEM_BYTES = 8
#: temporaries alive at once per point of a chunk (indices, operands, result, mask)
TEMPORARIES_PER_POINT = 4

_limit = None


def available_memory():
    """Bytes of memory available now, or None when the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def set_memory_limit(limit):
    """Set the bytes one stage's evaluation may use; None restores the default.

    Returns the previous setting (None for the default), so that it can be restored.

    >>> previous = set_memory_limit(2**30)
    >>> memory_limit()
    1073741824
    >>> set_memory_limit(previous)
    1073741824
    """
    global _limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit <= 0):
        raise TegradError(f"set_memory_limit: the limit must be a positive number of bytes "
                          f"or None, got {limit!r}")
    previous, _limit = _limit, limit
    return previous


def memory_limit():
    """The limit in force in bytes: the one set, else a fraction of the available memory."""
    if _limit is not None:
        return _limit
    available = available_memory()
    return None if available is None else int(available * DEFAULT_FRACTION)


def format_bytes(n):
    """``4.0 MB`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1000
    return f"{n:.1f} PB"


def check_stage_memory(t, needed, what, limit):
    """Raise a TegradError naming the stage ``t`` when ``needed`` bytes exceed ``limit``."""
    if limit is None or needed <= limit:
        return
    raise TegradError(f"stage {t.name!r} (shape {t.shape}, {t.size} points) needs about "
                      f"{format_bytes(needed)} to evaluate ({what}), more than the memory "
                      f"limit of {format_bytes(limit)}; raise it with "
                      f"tg.set_memory_limit(bytes) or tg.evaluate(..., memory_limit=bytes)")


def temporary_bytes(points):
    """Bytes of the temporaries of evaluating ``points`` points at once."""
    return points * TEMPORARY_ITEM_BYTES * TEMPORARIES_PER_POINT
