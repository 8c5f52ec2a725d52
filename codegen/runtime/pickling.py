"""Pickling a compiled function by its program: the input and output tensors (with every
stage and expression they reach) and the build options; unpickling builds it again.

Tensors and stages are immutable (their ``__setattr__`` refuses), and the built-in
reducers hold functions made by lambdas, so the default pickler cannot take a program:
:class:`ProgramPickler` gives those objects a reduction of their own (immutable objects
are restored field by field, built-in reducers by name). Within one process the build
cache finds the program again by its structure, so a worker that receives the same
function for every task compiles it once.

>>> import pickle, numpy as np, tegrad as tg
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> f = tg.build([x], [x * 2.0])
>>> g = pickle.loads(pickle.dumps(f))
>>> g(np.arange(3.0))[0].tolist()
[0.0, 2.0, 4.0]
"""
from __future__ import annotations

import copyreg
import io
import pickle

from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.runtime.builder import build
from tegrad.codegen.runtime.compiled import PICKLING
from tegrad.ir.errors import TegradError
from tegrad.ir.expr import Node
from tegrad.ir.reduction import BUILTIN_REDUCERS, Reducer
from tegrad.ir.tensor import Tensor, _Frozen


def _slot_names(cls):
    return [s for c in cls.__mro__ for s in getattr(c, "__slots__", ()) if s != "__weakref__"]


def _restore(obj, state):
    """Set the fields of an immutable object being unpickled (its ``__setattr__`` refuses)."""
    for key, value in state.items():
        object.__setattr__(obj, key, value)


def _builtin_reducer(name):
    return BUILTIN_REDUCERS[name]


class ProgramPickler(pickle.Pickler):
    """A pickler for tensors, stages and expressions (see the module doc)."""

    def reducer_override(self, obj):
        if isinstance(obj, (Tensor, _Frozen)):
            state = {s: getattr(obj, s) for s in _slot_names(type(obj)) if hasattr(obj, s)}
            return object.__new__, (type(obj),), state, None, None, _restore
        if isinstance(obj, Node) and "_hash" in obj.__dict__:
            # the cached structural hash derives from string hashes, which differ between
            # processes: left out, it is computed again where the program is unpickled
            state = {k: v for k, v in obj.__dict__.items() if k != "_hash"}
            return copyreg.__newobj__, (type(obj),), state
        if isinstance(obj, Reducer) and BUILTIN_REDUCERS.get(obj.name) is obj:
            return _builtin_reducer, (obj.name,)
        return NotImplemented


def dumps_program(inputs, outputs, what):
    """The bytes of the program ``(inputs, outputs)``; ``what`` names it in errors (a
    user-defined reducer whose functions cannot be pickled, e.g. lambdas)."""
    buffer = io.BytesIO()
    try:
        ProgramPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump((inputs, outputs))
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        raise TegradError(f"{what} cannot be pickled: its program holds an object pickle "
                          f"cannot take ({err}); a tg.comm_reducer made of module-level "
                          f"functions can be") from None
    except RecursionError:
        raise TegradError(f"{what} cannot be pickled: its expressions are nested deeper "
                          f"than Python's recursion limit allows pickle to go") from None
    return buffer.getvalue()


def loads_program(data):
    """``(inputs, outputs)`` from :func:`dumps_program`'s bytes."""
    return pickle.loads(data)


def build_options(f):
    """The options ``f`` was built with, as keywords of :func:`tegrad.build`: its kernel's
    name, its thread count (None, every usable core, when it has that many), bounds checks and profiling when on, and ``schedule="none"`` when its
    stages kept their plain loops, else the ``schedule=`` it was built with (per-stage
    requests or a replayed :class:`~tegrad.codegen.schedule.steps.Schedule`, which the
    function keeps for ``f.export``)."""
    executable, record = f._executable, f._schedule_record
    # a function built for every usable core is rebuilt for every core of the process
    # unpickling it (and finds itself in the build cache of its own process)
    threads = None if executable.threads == resolve_threads(None) else executable.threads
    options = {"name": f.kernel.name, "threads": threads}
    if getattr(executable, "check_bounds", False):
        options["check_bounds"] = True
    if getattr(executable, "profile", False):
        options["profile"] = True
    if record is None:
        options["schedule"] = "none"
    elif record.manual:
        if f._schedule is None:
            raise TegradError(f"the compiled function {f.kernel.name!r} cannot be pickled: "
                              f"the schedule= requests for the stages "
                              f"{', '.join(map(repr, record.manual))} it was built with are "
                              f"not kept; build it where it runs")
        # the requests as given (a dict of names and numbers, or a Schedule of steps):
        # the same program built with them gets the same loops
        options["schedule"] = f._schedule
    return options


def reduce_function(f):
    """``f.__reduce__()``: rebuild from the pickled program and options."""
    what = f"the compiled function {f.kernel.name!r}"
    return rebuild, (dumps_program(f.inputs, f.outputs, what), build_options(f))


def rebuild(program, options):
    """The compiled function of a pickled program (cheap when the build cache has it)."""
    inputs, outputs = loads_program(program)
    return build(inputs, outputs, **options)


PICKLING["reduce"] = reduce_function

__all__ = ["ProgramPickler", "build_options", "dumps_program", "loads_program", "rebuild"]
