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

Whatever the limit, no buffer may need more than the machine's physical memory
(:func:`physical_memory`): the evaluator and compiled functions (their temporaries when
built, their outputs when called) refuse such a buffer up front with a
:class:`BufferTooLargeError` naming it, its shape and its bytes, instead of numpy's
``MemoryError`` or ``ValueError`` naming no tensor (or a swapping, then killed, process).

>>> check_buffers_fit([("big", (2**31 - 1, 2**31 - 1), "float32")], "temporary")
Traceback (most recent call last):
...
tegrad.ir.errors.BufferTooLargeError: the temporary 'big' (shape (2147483647, 2147483647), float32) needs 18.4 EB (18446744056529682436 bytes), more than this machine's physical memory (...)
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np

from tegrad.ir.errors import BufferTooLargeError, TegradError

#: the fraction of the available memory one stage may use when no limit is set
DEFAULT_FRACTION = 0.5
#: bytes per element of a temporary (index arrays are int64; values at most 8 bytes)
TEMPORARY_ITEM_BYTES = 8
#: temporaries alive at once per point of a chunk (indices, operands, result, mask)
TEMPORARIES_PER_POINT = 4

_limit = None

#: where a control group's memory limit is read (cgroup v2, then v1): a container's
#: processes are killed past it, whatever memory the machine has
CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@functools.lru_cache(maxsize=None)
def physical_memory():
    """Bytes of physical memory this process may use: the machine's, or its control
    group's limit when that is lower; None when neither is known (read once)."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        pass
    for path in CGROUP_LIMIT_FILES:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) or a huge number (v1) mean no limit
            sizes.append(int(text))
    sizes = [n for n in sizes if n > 0]
    return min(sizes) if sizes else None


def buffer_bytes(shape, dtype):
    """The bytes of a C-contiguous array (exact: Python integers do not overflow).

    >>> buffer_bytes((2**31 - 1, 2**31 - 1), "float64") > 2**64
    True
    """
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def check_buffers_fit(buffers, role, memory=None):
    """Raise a :class:`BufferTooLargeError` when one of ``buffers`` (``(name, shape,
    dtype)`` triples), or all of them together, need more bytes than ``memory``
    (default: :func:`physical_memory`; nothing is checked when it is unknown). ``role``
    names them in the message ("temporary", "output").

    >>> check_buffers_fit([("y", (1000,), "float64")], "output", memory=4000)
    Traceback (most recent call last):
    ...
    tegrad.ir.errors.BufferTooLargeError: the output 'y' (shape (1000,), float64) needs 8.0 kB (8000 bytes), more than this machine's physical memory (4.0 kB)
    """
    memory = physical_memory() if memory is None else memory
    if memory is None:
        return
    sized = [(name, tuple(shape), np.dtype(dtype), buffer_bytes(shape, dtype))
             for name, shape, dtype in buffers]
    for name, shape, dtype, n in sized:
        if n > memory:
            raise BufferTooLargeError(
                f"the {role} {name!r} (shape {shape}, {dtype}) needs {format_bytes(n)} "
                f"({n} bytes), more than this machine's physical memory "
                f"({format_bytes(memory)})")
    total = sum(n for *_, n in sized)
    if total > memory:
        parts = ", ".join(f"{name!r} (shape {shape}, {dtype}): {format_bytes(n)}"
                          for name, shape, dtype, n in sorted(sized, key=lambda s: -s[3]))
        raise BufferTooLargeError(
            f"the {role} buffers need {format_bytes(total)} ({total} bytes) together, more "
            f"than this machine's physical memory ({format_bytes(memory)}): {parts}")


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
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if n < 1000 or unit == "EB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1000
    return f"{n:.1f} EB"


def check_stage_memory(t, needed, what, limit):
    """Raise a TegradError naming the stage ``t`` when ``needed`` bytes exceed ``limit``;
    a :class:`BufferTooLargeError` when they exceed the machine's physical memory, whatever
    the limit (a limit set above it does not make the memory exist)."""
    memory = physical_memory()
    if memory is not None and needed > memory:
        over_limit = (f"the memory limit of {format_bytes(limit)} and "
                      if limit is not None and limit < needed else "")
        raise BufferTooLargeError(
            f"stage {t.name!r} (shape {t.shape}, {t.dtype}, {t.size} points) needs about "
            f"{format_bytes(needed)} ({needed} bytes) to evaluate ({what}), more than "
            f"{over_limit}this machine's physical memory ({format_bytes(memory)})")
    if limit is None or needed <= limit:
        return
    raise TegradError(f"stage {t.name!r} (shape {t.shape}, {t.size} points) needs about "
                      f"{format_bytes(needed)} to evaluate ({what}), more than the memory "
                      f"limit of {format_bytes(limit)}; raise it with "
                      f"tg.set_memory_limit(bytes) or tg.evaluate(..., memory_limit=bytes)")


def temporary_bytes(points):
    """Bytes of the temporaries of evaluating ``points`` points at once."""
    return points * TEMPORARY_ITEM_BYTES * TEMPORARIES_PER_POINT
