"""``tegrad.build``: compile a program to a native function, with a cache.

Compiled code is cached by the program's structural key (:mod:`.program_key`) and the
options, so building an equal program again (even from new tensor objects) reuses it;
building the very same tensors again is a dictionary lookup.

A program this process has not built is looked up in the on-disk cache of built programs
(:mod:`.program_cache`), where an earlier process (a training script's first run) left
its loops, schedule and machine code, and written there once built.

The cache keeps at most :data:`CACHE_SIZE` programs and :data:`CACHE_BYTES` bytes of
them (their temporaries and compiled code, :attr:`Executable.nbytes`), dropping the least
recently built first (the most recent one is kept whatever its size). It keeps no
outputs: a function's spare output arrays live as long as the function the caller
holds, which the cache references only weakly.
"""
from __future__ import annotations

import collections
import ctypes
import functools
import gc
import numbers
import os
import re
import threading
import weakref

from tegrad.autodiff.result import Gradients
from tegrad.ir.errors import TegradError
from tegrad.ir.expr import structural_equal
from tegrad.ir.stages import is_placeholder
from tegrad.ir.tensor import Tensor
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.tuning import CACHE_BYTES, CACHE_SIZE
from tegrad.codegen.kernels.gemm import request_shared_routines
from tegrad.codegen.lower.in_place import rare_branch_after, write_in_place
from tegrad.codegen.lower.program import product_dtypes
from tegrad.codegen.pipeline import check_schedule, compile_kernel
from tegrad.codegen.runtime import program_cache
from tegrad.codegen.runtime.compiled import CompiledFunction
from tegrad.codegen.runtime.executable import Executable
from tegrad.codegen.runtime.profile import check_profile_option
from tegrad.codegen.runtime.program_key import program_key
from tegrad.codegen.schedule.steps import Schedule

#: key -> (executable, schedule record, schedule)
_executables = collections.OrderedDict()
#: (ids of inputs, ids of outputs, options) -> (inputs, outputs, key, weak reference
#: to the last function returned)
_functions = collections.OrderedDict()
_cached_bytes = 0
_lock = threading.Lock()


def _new_lock_in_child():
    # a thread of the parent that held it at fork() never releases it in the child
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def flatten_tensors(value, *, caller, what="outputs"):
    """``value`` (a tensor, a :func:`tegrad.differentiate` result, or a list mixing them)
    as a flat list of tensors; anything else raises a ``TegradError`` that starts with
    ``caller`` and names ``what``.

    >>> import tegrad as tg
    >>> x = tg.placeholder((2,), name="x")
    >>> [t.name for t in flatten_tensors([x, tg.differentiate(x * 2.0, [x])], caller="f")]
    ['x', 'dx']
    """
    if isinstance(value, (Tensor, Gradients)):
        value = [value]
    try:
        items = list(value)
    except TypeError:
        raise TegradError(f"{caller}: {what} must be a tensor, a differentiate() result or "
                          f"a list of them, got {value!r}") from None
    flat = []
    for item in items:
        if isinstance(item, Gradients):
            flat.extend(item.result)
        elif isinstance(item, Tensor):
            flat.append(item)
        else:
            raise TegradError(f"{caller}: {what} must be tensors or differentiate() results, "
                              f"got {item!r}")
    return flat


def _flatten_outputs(outputs):
    flat = flatten_tensors(outputs, caller="build")
    if not flat:
        raise TegradError("build: no outputs to compute")
    return flat


def _check_inputs(inputs, outputs):
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    seen = set()
    for t in inputs:
        if not isinstance(t, Tensor) or not is_placeholder(t):
            raise TegradError(f"build: inputs must be placeholders, got {t!r}")
        if id(t) in seen:
            raise TegradError(f"build: the placeholder {t.name!r} is given twice as an input")
        seen.add(id(t))
    return inputs  # placeholders the outputs need and the inputs lack: see program_key


def _kernel_name(name, outputs):
    if name is None:
        name = "_".join(t.name for t in outputs)[:48] or "kernel"
    if not isinstance(name, str):
        raise TegradError(f"build: name must be a string, got {name!r}")
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else f"k_{cleaned}"


def _remember(cache, key, value):
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)


def _remember_executable(key, entry):
    """Cache ``entry`` (the caller holds the lock), then drop the least recently built
    programs while the cache holds more than CACHE_SIZE programs or CACHE_BYTES."""
    global _cached_bytes
    old = _executables.pop(key, None)
    if old is not None:
        _cached_bytes -= old[0].nbytes
    _executables[key] = entry
    _cached_bytes += entry[0].nbytes
    while len(_executables) > 1 and (len(_executables) > CACHE_SIZE
                                     or _cached_bytes > CACHE_BYTES):
        _, (dropped, *_) = _executables.popitem(last=False)
        _cached_bytes -= dropped.nbytes


class _SameKernel:
    """A kernel as a dictionary key: equal to an equal kernel (structurally, and in its
    text, where a constant -0.0 differs from 0.0)."""

    __slots__ = ("kernel", "options")

    def __init__(self, kernel, options):
        self.kernel, self.options = kernel, options

    def __hash__(self):
        return hash((self.kernel, self.options))

    def __eq__(self, other):
        return (self.options == other.options and structural_equal(self.kernel, other.kernel)
                and format_kernel(self.kernel) == format_kernel(other.kernel))


#: executables by the kernel they run (and their options), while something holds them:
#: a program that compiles to a kernel built before (its own schedule replayed,
#: ``schedule=f.schedule``) reuses its machine code instead of compiling it again
_by_kernel = weakref.WeakValueDictionary()


def _executable_of(kernel, threads, check_bounds, profile=False, defer_rare=True):
    key = _SameKernel(kernel, (threads, check_bounds, profile, defer_rare))
    with _lock:
        executable = _by_kernel.get(key)
    if executable is None:
        executable = Executable(kernel, threads=threads, check_bounds=check_bounds,
                                profile=profile, defer_rare=defer_rare)
        with _lock:
            _by_kernel[key] = executable
    return executable


def request_product_routines(outputs):
    """Start compiling, on the JIT's background thread, the shared routines of the
    products a build of ``outputs`` (or of their gradients: those of a product are
    products of its dtype) runs (:func:`~tegrad.codegen.kernels.gemm.request_shared_routines`);
    returns at once, and does nothing for outputs that are not a program (the build or
    the differentiation reports those). ``tg.differentiate`` calls it as it begins: a
    first build then finds them compiled while the gradients were derived.

    >>> import tegrad as tg
    >>> a = tg.placeholder((64, 64), name="a")
    >>> request_product_routines(tg.ops.matmul(a, a)); request_product_routines("not one")
    """
    try:
        dtypes = product_dtypes(outputs)
    except TegradError:
        return
    for dtype in dtypes:
        request_shared_routines(dtype)


def _built(key, inputs, outputs, *, threads, schedule, name, check_bounds, profile,
           updates=None):
    """``(executable, schedule record, schedule)`` of the program ``key`` (of ``inputs``
    and ``outputs``, built with the options given): from the on-disk cache when an
    earlier process left it there, else compiled (and left there). A profiled build is
    not cached on disk: its timers are set up as its module is emitted. ``updates``: see
    :func:`build_updating`."""
    disk_key = None if profile else program_cache.entry_key(key, threads)
    if disk_key is not None:
        built = program_cache.load(disk_key, threads=threads, check_bounds=check_bounds)
        if built is not None:
            return built
    if schedule != "none":
        # the shared routines of its products compile on the JIT's background thread
        # while the program is lowered and emitted, not after
        request_product_routines(outputs)
    compiled = compile_kernel(inputs, outputs, threads=threads, schedule=schedule, name=name)
    kernel, defer_rare = compiled.kernel, True
    if updates is not None:
        kernel, defer_rare = _written_in_place(kernel, len(inputs), updates)
    built = (_executable_of(kernel, threads, check_bounds, profile, defer_rare),
             compiled.record, compiled.schedule)
    if disk_key is not None:
        program_cache.store(disk_key, built)
    return built


def _cached(key, inputs, outputs, **options):
    """:func:`_built` of the program ``key``, from the cache of this process when there."""
    with _lock:
        built = _executables.get(key)
        if built is not None:
            _executables.move_to_end(key)
    if built is None:
        built = _built(key, inputs, outputs, **options)
        with _lock:
            _remember_executable(key, built)
    return built


def _written_in_place(kernel, n_inputs, first):
    """``(kernel', defer_rare)``: ``kernel`` with each output after the first written into
    the input it replaces (the inputs from the ``first``-th on, in order) where
    :func:`~tegrad.codegen.lower.in_place.write_in_place` allows; its rare branches are
    compiled at once when one comes after an update in place (running the kernel again
    from the start would read updated values)."""
    pairs = list(zip(kernel.args[n_inputs + 1:], kernel.args[first:n_inputs]))
    kernel, done = write_in_place(kernel, pairs)
    written = [old for (_, old), ok in zip(pairs, done) if ok]
    return kernel, not rare_branch_after(kernel, written)


def build_updating(inputs, outputs, first, *, threads=None, name=None, profile=False):
    """``(function, updated)``: the program computing ``outputs`` (a value, then the next
    values of ``inputs[first:]``, in order: a training step's loss and updates) with each
    update written into its input's array where the kernel allows (``updated[k]``, for
    ``inputs[first + k]``); ``function``'s outputs are the first and the updates not
    written in place. Cached as :func:`build` caches, on disk too (the in-place kernel
    and its machine code), and profiled with ``profile=True`` as ``build`` is.

    >>> import numpy as np, tegrad as tg
    >>> x, w = (tg.placeholder((3,), dtype="float64", name=n) for n in "xw")
    >>> f, updated = build_updating([x, w], [x * 1.0, w + x], 1, threads=1)
    >>> a = np.zeros(3); (f(np.ones(3), a, out=[np.empty(3)]), updated, a.tolist())[1:]
    ([True], [1.0, 1.0, 1.0])
    """
    outputs = _flatten_outputs(outputs)
    inputs = _check_inputs(inputs, outputs)
    profile = check_profile_option(profile)
    options = (threads, _kernel_name(name, outputs), None, False, profile, ("updates", first))
    key = (program_key(inputs, outputs), options)
    executable, record, chosen = _cached(key, inputs, outputs, threads=threads, schedule=None,
                                         name=options[1], check_bounds=False, profile=profile,
                                         updates=first)
    facts = executable.facts
    args = {b.name for b in facts.buffers[:facts.n_args]}
    updated = [t.name not in args for t in outputs[1:]]
    kept = [outputs[0]] + [t for t, done in zip(outputs[1:], updated) if not done]
    function = CompiledFunction(inputs, kept, executable, schedule_record=record,
                                chosen=chosen)
    return function, updated


def cache_bytes():
    """The bytes the cached programs hold (see :data:`CACHE_BYTES`).

    >>> clear_cache(); cache_bytes()
    0
    """
    with _lock:
        return _cached_bytes


def _frozen(value):
    """A hashable form of a schedule option (dicts and lists become sorted tuples, a
    Schedule the fields of its steps: tuples of names and numbers, which the on-disk
    cache serialises)."""
    if isinstance(value, Schedule):
        return ("Schedule",) + tuple((s.primitive, s.stage, s.args) for s in value.steps)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted(((repr(k), _frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list",) + tuple(_frozen(v) for v in value)
    if isinstance(value, (str, numbers.Number, type(None))):
        return value
    raise TegradError(f"build: schedule holds {value!r}, which is not a name, a number, a "
                      f"list or a dict")


def _check_bounds_default(check_bounds):
    """``check_bounds``, or when None the environment's ``TEGRAD_CHECK_BOUNDS`` (set and
    not ``0``: on)."""
    if check_bounds is None:
        return os.environ.get("TEGRAD_CHECK_BOUNDS", "0").strip() not in ("", "0")
    if not isinstance(check_bounds, bool):
        raise TegradError(f"build: check_bounds must be True, False or None, got "
                          f"{check_bounds!r}")
    return check_bounds


def build(inputs, outputs, *, threads=None, name=None, schedule=None, check_bounds=None,
          profile=False):
    """Compile the program computing ``outputs`` from the placeholders ``inputs``.

    ``outputs`` is a tensor, a list of tensors, or a :func:`tegrad.differentiate` result
    (its gradients), or a list mixing them. Returns a :class:`CompiledFunction`: call it
    with one array per input; it returns a list of arrays, one per output (a list even
    for one output, so that a training step unpacks the same way whatever it returns).
    ``threads`` is the number of threads parallel loops and contractions (stages run on
    the gemm kernel) use (None: every usable core; 1: none but the caller's); it is part
    of the cache key. Each stage's outer loop runs in parallel when its iterations are
    independent and its work pays for a fork-join (see
    :mod:`tegrad.codegen.schedule.parallel`); results do not depend on ``threads``.
    ``name`` names the kernel (default: from the outputs' names).

    ``check_bounds=True`` checks every element access of the compiled loops at run time
    (each index against its axis, the offset against the buffer) and raises
    ``tg.OutOfBoundsError`` naming the buffer and the stage at the first one outside;
    slower, for finding a miscompiled program. ``None`` (the default) takes it from the
    environment variable ``TEGRAD_CHECK_BOUNDS`` (``1``: on; unset or ``0``: off). It is
    part of the cache key.

    ``profile=True`` times each top-level statement of the kernel (a stage, fused stages
    or a product kernel) on every call: ``f.profile()`` is the table (see
    :mod:`tegrad.codegen.runtime.profile`). Off (the default), nothing of it is compiled.
    Part of the cache key; exports (``f.export``) are never profiled.

    Stages computing the same values run once, and each stage's loops are scheduled
    automatically; every choice is a step, and ``f.schedule`` is the
    :class:`~tegrad.codegen.schedule.steps.Schedule` of them (printed: per stage its
    loops and the steps that made them). ``schedule=f.schedule`` (or a Schedule edited
    from its steps, see :mod:`tegrad.codegen.schedule.primitives`) compiles with exactly
    those steps, choosing nothing: the same program gets the same loops. A dict overrides
    the automatic schedule per stage, by the name of the tensor it computes: ``"none"``
    keeps a stage's plain loops, a dict asks for ``"split"``, ``"order"``,
    ``"compute_at"``, ``"unroll"``, ``"vectorize"`` and ``"parallel"`` steps (see
    :mod:`tegrad.codegen.schedule.manual`); ``schedule="none"`` keeps every stage plain.
    Unknown stages or loops and steps that would change the result or not be realised
    raise a ``TegradError`` naming the stage. The passes are
    :mod:`tegrad.codegen.pipeline`'s, which ``tg.export`` and ``f.export`` run too.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((3,), dtype="float64", name="x")
    >>> y = tg.compute((3,), lambda i: x[i] * x[i], name="y")
    >>> f = tg.build([x], [y, tg.differentiate(y, [x])])
    >>> [a.tolist() for a in f(np.array([1.0, 2.0, 3.0]))]
    [[1.0, 4.0, 9.0], [2.0, 4.0, 6.0]]
    >>> g = tg.build([x], [y], schedule={"y": {"unroll": "i"}})
    >>> print(g.schedule)
    stage y (as given)
      loops: i<3 unrolled
      keeps its loops (no product kernel)
      i: unrolled
    program
      stages computing the same values computed once
      stages with a product plan lowered to product kernels
    >>> tg.build([x], [y], schedule=g.schedule).loops == g.loops
    True
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral)
                                or threads < 1):
        raise TegradError(f"build: threads must be a positive integer or None, got {threads!r}")
    outputs = _flatten_outputs(outputs)
    inputs = _check_inputs(inputs, outputs)
    kernel_name = _kernel_name(name, outputs)
    schedule = check_schedule(schedule, "build")
    check_bounds = _check_bounds_default(check_bounds)
    profile = check_profile_option(profile)
    options = (threads, kernel_name, _frozen(schedule), check_bounds, profile)
    identity = (tuple(map(id, inputs)), tuple(map(id, outputs)), options)
    with _lock:
        known = _functions.get(identity)
    key = None
    if known is not None and all(a is b for a, b in zip(known[0], inputs)) \
            and all(a is b for a, b in zip(known[1], outputs)):
        f = known[3]()
        if f is not None:
            return f
        key = known[2]  # the function was dropped: its program may still be cached
    if key is None:
        key = (program_key(inputs, outputs), options)
    executable, record, chosen = _cached(key, inputs, outputs, threads=threads,
                                         schedule=schedule, name=kernel_name,
                                         check_bounds=check_bounds, profile=profile)
    f = CompiledFunction(inputs, outputs, executable, schedule_record=record,
                         schedule=schedule, chosen=chosen)
    with _lock:
        _remember(_functions, identity, (tuple(inputs), tuple(outputs), key, weakref.ref(f)))
    return f


def clear_cache():
    """Forget every compiled program (the next builds compile again), and give the memory
    they held back to the system.

    >>> clear_cache()
    """
    global _cached_bytes
    with _lock:
        _executables.clear()
        _functions.clear()
        _by_kernel.clear()
        _cached_bytes = 0
    gc.collect()  # programs in reference cycles (a traceback holding a function)
    _trim_heap()


def _trim_heap():
    """Return the C heap's free pages to the system (glibc keeps the pages freed by
    LLVM's engines, scattered between live allocations: without this the process kept
    about 0.7 MB per program dropped)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=None)
def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


__all__ = ["CACHE_BYTES", "CACHE_SIZE", "build", "build_updating", "cache_bytes", "clear_cache",
           "flatten_tensors"]
