"""The schedule as a value: a :class:`Schedule` is an immutable sequence of :class:`Step` s.

Every choice the compile pipeline makes about how a program runs is a step,
``Step(primitive, stage, args)``, made before any code is emitted: which stages merge,
which run on product kernels (and which kernel and blocking), every loop split, moved,
tiled, unrolled, vectorised or run in parallel. ``f.schedule`` is the schedule a build
chose; ``tg.build(..., schedule=f.schedule)`` applies exactly those steps again (no
choice is made) and compiles the same loops. The primitives, what their arguments
mean and how each is applied are :data:`~.primitives.PRIMITIVES`.

``stage`` names the statement of the kernel a step applies to (None: the whole
program): the first tensor the statement computes, as ``f.loops`` and ``f.schedule``
show it (``name#2`` for the second statement computing ``name``, such as the loop of a
reduction after its initial store). A step that names a loop checks that the loop is
in that stage; a ``plain`` step names the tensor itself (as lowering knows it).

>>> s = Schedule([Step("unroll", "y", ("i",)), Step("vectorize", "y", ("j",))])
>>> len(s), s[0].primitive, s == Schedule(list(s)), Step("unroll", "y", ("i",)) in s
(2, 'unroll', True, True)
>>> print(s)
y: unroll i
y: vectorize j
>>> statement_key("b#2"), statement_key("b")
(('b', 2), ('b', 1))
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from tegrad.codegen.loops.nodes import Block
from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.schedule.fusion import stage_names


def _frozen(value, where):
    """``value`` with lists made tuples (a step is hashable), or a ScheduleError."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v, where) for v in value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ScheduleError(f"{where}: a step's arguments are names, numbers and tuples of "
                        f"them, got {value!r}")


@dataclass(frozen=True)
class Step:
    """One choice: apply ``primitive`` (a name of :data:`~.primitives.PRIMITIVES`) to
    ``stage`` (a statement's name, a tensor's for ``product``, None for the whole
    program) with ``args`` (a tuple of names, numbers and tuples of them).

    >>> Step("split", "B", ["j", 8])
    Step('split', 'B', ('j', 8))
    """

    primitive: str
    stage: Optional[str]
    args: tuple = ()

    def __post_init__(self):
        if not isinstance(self.primitive, str):
            raise ScheduleError(f"a step's primitive is a name, got {self.primitive!r}")
        if self.stage is not None and not isinstance(self.stage, str):
            raise ScheduleError(f"step {self.primitive!r}: its stage is a name or None, got "
                                f"{self.stage!r}")
        if not isinstance(self.args, (list, tuple)):
            raise ScheduleError(f"step {self.primitive!r} of stage {self.stage!r}: its "
                                f"arguments are a tuple, got {self.args!r}")
        object.__setattr__(self, "args", _frozen(
            self.args, f"step {self.primitive!r} of stage {self.stage!r}"))

    def __repr__(self):
        return f"Step({self.primitive!r}, {self.stage!r}, {self.args!r})"

    def __str__(self):
        args = " ".join(str(a) for a in self.args)
        return f"{self.stage or 'program'}: {self.primitive}" + (f" {args}" if args else "")


class Schedule(Sequence):
    """An immutable, hashable sequence of :class:`Step` s, equal to another with the
    same steps. ``str()`` is the readable form ``f.schedule`` prints: per statement of
    the kernel its loops and the steps that made them (a schedule made by hand or
    unpickled, which knows no kernel, lists its steps). ``"text" in schedule`` looks for the text in that
    form, ``step in schedule`` for the step.

    >>> Schedule([Step("fuse", "S", ("B",))]) == Schedule((Step("fuse", "S", ("B",)),))
    True
    """

    __slots__ = ("_steps", "_text")

    def __init__(self, steps=(), *, text=None):
        try:
            steps = tuple(steps) if not isinstance(steps, (str, bytes, dict)) else None
        except TypeError:
            steps = None
        if steps is None:
            raise ScheduleError("Schedule: give a sequence of steps")
        for s in steps:
            if not isinstance(s, Step):
                raise ScheduleError(f"Schedule: every step is a Step, got {s!r}")
        object.__setattr__(self, "_steps", steps)
        # the readable form, or a function making it (called once, when printed)
        object.__setattr__(self, "_text", text)

    def __setattr__(self, name, value):
        raise AttributeError("a Schedule is immutable: make a new one from its steps")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return Schedule, (self._steps,)

    @property
    def steps(self):
        """The steps, a tuple."""
        return self._steps

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Schedule(self._steps[index])
        return self._steps[index]

    def __len__(self):
        return len(self._steps)

    def __iter__(self):
        return iter(self._steps)

    def __contains__(self, item):
        if isinstance(item, str):
            return item in str(self)
        return item in self._steps

    def __eq__(self, other):
        return isinstance(other, Schedule) and self._steps == other._steps

    def __hash__(self):
        return hash(("Schedule", self._steps))

    def __str__(self):
        text = self._text
        if callable(text):
            text = text()
            object.__setattr__(self, "_text", text)
        return text if text is not None else "\n".join(map(str, self._steps))

    def __repr__(self):
        inner = ",\n ".join(map(repr, self._steps))
        return f"Schedule([{inner}])"


# -- naming statements -------------------------------------------------------------------


def parts(body):
    """The statements of a kernel body, blocks flattened (a stage lowered as a block,
    such as a scatter's fill and accumulation, counts as its statements)."""
    if type(body) is not Block:
        return [body]
    return [s for child in body.stmts for s in parts(child)]


def statement_key(key):
    """``(name, n)`` of a statement key ``name`` or ``name#n``."""
    name, sep, n = key.rpartition("#")
    if sep and n.isdigit() and name:
        return name, int(n)
    return key, 1


def names_of(stmts):
    """The stage names (:func:`~.fusion.stage_names`) of each of ``stmts``."""
    return [stage_names(s) for s in stmts]


def statement_keys(names):
    """The key naming each statement, given their stage ``names`` (:func:`names_of`): its
    first stage name, ``#n`` added when it is the ``n``-th statement computing that name
    (``statement k`` when it computes none).

    >>> statement_keys([("S",), ("S", "B"), ("C",), ()])
    ['S', 'S#2', 'C', 'statement 3']
    """
    seen, keys = {}, []
    for k, held in enumerate(names):
        for n in held:
            seen[n] = seen.get(n, 0) + 1
        if not held:
            keys.append(f"statement {k}")
        else:
            count = seen[held[0]]
            keys.append(held[0] if count == 1 else f"{held[0]}#{count}")
    return keys


def _unknown_stage(names, key):
    known = sorted({m for held in names for m in held})
    return ScheduleError(f"schedule: no stage named {key!r} (stages: {', '.join(known)})")


def find_statement(names, key):
    """The index of the statement named ``key`` (see :func:`statement_keys`) among
    statements of stage ``names``, or a ScheduleError listing the stages."""
    if not isinstance(key, str):
        raise ScheduleError(f"schedule: stage names are strings, got {key!r}")
    if key.startswith("statement ") and key[10:].isdigit() and int(key[10:]) < len(names):
        return int(key[10:])
    name, n = statement_key(key)
    found = [k for k, held in enumerate(names) if name in held]
    if len(found) >= n:
        return found[n - 1]
    raise _unknown_stage(names, key)


def holding(names, key):
    """The indices of the statements computing the stage ``key`` names (``#n`` aside: a
    loop a step names is looked for in every statement of the stage), or a
    ScheduleError listing the stages."""
    if not isinstance(key, str):
        raise ScheduleError(f"schedule: stage names are strings, got {key!r}")
    name, _ = statement_key(key)
    found = [k for k, held in enumerate(names) if name in held]
    if not found:
        raise _unknown_stage(names, key)
    return found


__all__ = ["Schedule", "Step", "find_statement", "holding", "names_of", "parts",
           "statement_key", "statement_keys"]
