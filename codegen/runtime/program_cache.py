"""Built programs kept on disk: a process building a program that an earlier one built (a
training script's second run) loads its loops, its schedule and its machine code instead
of lowering, scheduling, emitting and compiling it again.

An entry is the ``"program"`` kind of :mod:`tegrad.codegen.object_cache` (its directory,
``TEGRAD_CACHE=0``, checked payloads, atomic writes and bound), keyed by the SHA-256 of
the program's structural key (:mod:`.program_key`) and the build options, serialised
canonically (:func:`canonical`), with everything else the built code depends on: the
host target, the object layout the Python entry reads (:func:`.executable.python_abi`),
the threads ``threads=None`` stands for, the versions of Python, llvmlite and LLVM, and
the fingerprint of the compiler's source (so an edited compiler never loads an entry an
older one wrote). It holds the schedule record and steps, the
:class:`~.executable.ModuleFacts` of the kernel's module and the kernel (the loop IR,
pickled on its own: it is read when first needed, for ``f.loops`` or the printed
schedule, as running the machine code does not need it); the machine code stays in the
object cache, under the key the facts name (if it has been dropped since, the kernel is
emitted and compiled again: the lowering and the schedule are still saved).

A program whose key cannot be serialised canonically (one with a user-defined reducer,
which compares by identity) is not cached on disk: it builds as without the cache.
``TEGRAD_PROGRAM_CACHE=0`` turns this cache off and leaves the object cache on.

The payload is a pickle of loop-IR nodes and plain data, written by
:class:`_EntryPickler` (an expression's structural hash, which is derived from string
hashes that differ between processes, is left out) and read by :class:`_EntryUnpickler`,
which makes nothing but classes of tegrad and its built-in reducers.
"""
from __future__ import annotations

import copyreg
import io
import marshal
import os
import pickle

from tegrad.ir.expr import Node
from tegrad.ir.reduction import BUILTIN_REDUCERS, Reducer
from tegrad.codegen import object_cache
from tegrad.codegen.target import Target
from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.schedule.describe import describe_schedule
from tegrad.codegen.schedule.steps import Schedule
from tegrad.codegen.runtime import executable as _executable
from tegrad.codegen.runtime.executable import Executable

#: the kind of entry in :mod:`tegrad.codegen.object_cache`
KIND = "program"

#: this process's hits, misses, writes and entries that did not check
STATS = object_cache.STATS_OF[KIND]


def enabled():
    """Whether built programs are cached on disk (the cache on, and not
    ``TEGRAD_PROGRAM_CACHE=0``)."""
    return (object_cache.cache_dir() is not None
            and os.environ.get("TEGRAD_PROGRAM_CACHE", "1").strip() != "0")


def canonical(value):
    """Bytes standing for ``value`` (a nest of tuples of strings, ints, floats, bools and
    None), the same in every process for equal values; None when ``value`` holds
    anything else.

    marshal's version 2 writes such values without references between objects and
    without marking interned strings (both of which depend on the process's history).
    It also writes any object with the buffer interface (a numpy scalar) as its bytes:
    the value read back must equal the one written, which rules those out (a
    user-defined reducer is refused by marshal itself). A set or a dict would be
    written in an order that may differ between processes (a miss, never a wrong hit);
    program keys hold neither.

    >>> canonical(("a", 1, (2.5, None))) == canonical(("a", 1, (2.5, None)))
    True
    >>> import numpy as np; canonical((np.float64(1.0),)) is None
    True
    """
    try:
        data = marshal.dumps(value, 2)
        same = marshal.loads(data) == value
    except (ValueError, TypeError):
        return None
    return data if same else None


def entry_key(key, threads):
    """The hex key of the entry of the program ``key`` (``(program_key(...), options)``,
    as :func:`tegrad.build` makes it) built for ``threads``; None when the program is not
    to be cached on disk (the cache off, or a key without a canonical form)."""
    if not enabled():
        return None
    body = canonical(key)
    if body is None:
        return None
    facts = (KIND, object_cache.source_fingerprint(), object_cache.versions(),
             repr(Target.host()), repr(_executable.python_abi()), str(resolve_threads(threads)))
    return object_cache.digest(facts, body)


class _EntryPickler(pickle.Pickler):
    """Loop-IR nodes and expressions by their fields (without the cached structural hash:
    string hashes differ between processes), built-in reducers by name; a user-defined
    reducer cannot be pickled (its program has no entry)."""

    def reducer_override(self, obj):
        if isinstance(obj, Node):
            state = obj.__dict__
            if "_hash" in state:
                state = {k: v for k, v in state.items() if k != "_hash"}
            return copyreg.__newobj__, (type(obj),), state
        if isinstance(obj, Reducer):
            if BUILTIN_REDUCERS.get(obj.name) is not obj:
                raise pickle.PicklingError(f"the user-defined reducer {obj.name!r}")
            return obj.name  # a global of tegrad.ir.reduction
        return NotImplemented


class _EntryUnpickler(pickle.Unpickler):
    """Makes classes of tegrad and its built-in reducers, nothing else."""

    def find_class(self, module, name):
        if module.startswith("tegrad.") and "." not in name:
            obj = super().find_class(module, name)
            if (isinstance(obj, type) and obj.__module__ == module) or (
                    isinstance(obj, Reducer) and BUILTIN_REDUCERS.get(name) is obj):
                return obj
        raise pickle.UnpicklingError(f"a program entry names {module}.{name}")


#: what reading an entry written by another version of these classes may raise (its key
#: names the compiler's source, so only an entry written by hand)
_UNREADABLE = (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError,
               ValueError)


def store(disk_key, built):
    """Write the entry of ``built`` (``(executable, schedule record, schedule)``, as
    :func:`tegrad.build` keeps it) under ``disk_key``; False when it was not written (a
    program holding what cannot be pickled, an unwritable directory)."""
    executable, record, chosen = built
    try:
        kernel = _dumps(executable.kernel)
        data = _dumps((record, chosen.steps, executable.facts, kernel))
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return False
    return object_cache.store(disk_key, data, KIND)


def _dumps(value):
    buffer = io.BytesIO()
    _EntryPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def _loads(data):
    return _EntryUnpickler(io.BytesIO(data)).load()


def load(disk_key, *, threads, check_bounds):
    """``(executable, schedule record, schedule)`` of the entry under ``disk_key``, or
    None (no entry, or one that does not check or read, which is built again)."""
    data = object_cache.load(disk_key, KIND)
    if data is None:
        STATS["misses"] += 1
        return None
    try:
        record, steps, facts, kernel = _loads(data)
    except _UNREADABLE:
        STATS["corrupt"] += 1
        return None
    STATS["hits"] += 1
    executable = Executable.from_facts(facts, lambda: _loads(kernel), threads=threads,
                                       check_bounds=check_bounds)
    if executable is None:  # its machine code has left the object cache
        executable = Executable(_loads(kernel), threads=threads, check_bounds=check_bounds)
    # printed as schedule_value prints it, the kernel read when it is first printed
    chosen = Schedule(steps, text=lambda: describe_schedule(executable.kernel, record, steps))
    return executable, record, chosen


__all__ = ["KIND", "STATS", "canonical", "enabled", "entry_key", "load", "store"]
