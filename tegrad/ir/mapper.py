"""Mappers over expressions: a dispatching base, an identity mapper, and common walks.

An :class:`IdentityMapper` returns the very same node when nothing below it changed, so
a transformation that finds nothing to do costs no allocation and keeps hashes cached.

>>> from tegrad.ir.expr import Var
>>> e = Var("i") + 1
>>> IdentityMapper()(e) is e
True
"""
from __future__ import annotations

import inspect
from types import GeneratorType

from tegrad.ir.errors import TegradError
from tegrad.ir.expr import (REDUCTIONS, And, Binary, Call, Cast, Compare, Const, IterVar, Neg, Not,
                            Or, Read, Reduce, Select, TupleReduce, Var, as_expr)


class NodeMemo:
    """Results keyed by node identity.

    Each entry holds its node, so the node's ``id`` cannot be reused by another object
    while the memo lives (structural equality would be too slow and too loose here).

    >>> from tegrad.ir.expr import Var
    >>> memo, i = NodeMemo(), Var("i")
    >>> memo[i] = "seen"
    >>> memo.get(i), memo.get(Var("i"))
    ('seen', None)
    """

    __slots__ = ("_table",)

    def __init__(self):
        self._table = {}

    def get(self, node, default=None):
        """The result stored for ``node`` (the very object), else ``default``."""
        hit = self._table.get(id(node))
        return hit[1] if hit is not None and hit[0] is node else default

    def __setitem__(self, node, result):
        self._table[id(node)] = (node, result)


class Dispatcher:
    """Dispatch on a class through ``_method_names``, a table ``{class: method name}``.

    A subclass declares only the classes it adds (a code generator's ``Load``); the
    table it gets is merged with those of its bases along the MRO.
    """

    _method_names = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        table = {}
        for base in reversed(cls.__mro__):
            table.update(base.__dict__.get("_method_names", {}))
        cls._method_names = table

    def method_for(self, kind, what):
        """The bound method handling ``what``, an object of class ``kind``."""
        try:
            return getattr(self, self._method_names[kind])
        except KeyError:
            # not repr(what): printing an unknown node would dispatch on it again
            raise TypeError(f"{type(self).__name__} has no method for a "
                            f"{kind.__name__}") from None


def run(work):
    """The result of ``work``: a plain value, or a generator run on an explicit stack.

    A generator stands for a recursive call: each object it yields is a sub-call's work
    (a value, sent straight back, or another generator, run to its return value first)
    and the ``yield`` evaluates to that sub-call's result; what it returns is its own
    result. An exception a sub-call raises is thrown into its caller at that ``yield``.
    So a recursive function turns iterative by writing ``(yield f(child))`` for
    ``f(child)``, and nests as deep as memory allows.

    >>> def depth(n):
    ...     return 0 if n == 0 else 1 + (yield depth(n - 1))
    >>> run(depth(100_000))
    100000
    """
    if type(work) is not GeneratorType:
        return work
    stack, value, error = [work], None, None
    while True:
        top = stack[-1]
        try:
            step = top.send(value) if error is None else top.throw(error)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value, error = done.value, None
            continue
        except BaseException as exc:
            stack.pop()
            if not stack:
                raise
            value, error = None, exc
            continue
        error = None
        if type(step) is GeneratorType:
            stack.append(step)
            value = None
        else:
            value = step


class Mapper(Dispatcher):
    """Dispatch ``self(expr)`` to ``self.map_<kind>(expr, *args)``.

    A ``map_<kind>`` method may be a generator (see :func:`run`): it gets a child's
    result with ``(yield self.visit(child, *args))`` and runs without recursion.
    """

    _method_names = {
        Const: "map_const", Var: "map_var", Binary: "map_binary", Neg: "map_neg",
        Compare: "map_compare", And: "map_and", Or: "map_or", Not: "map_not",
        Select: "map_select", Cast: "map_cast", Call: "map_call", Read: "map_read",
        Reduce: "map_reduce", TupleReduce: "map_tuple_reduce",
    }

    def __call__(self, expr, *args):
        return run(self.visit(expr, *args))

    def map_tuple_reduce(self, e, *args):
        # a pass that has not learnt reductions of tuples says so, rather than guess
        raise TegradError(f"{type(self).__name__} does not handle reductions of tuples "
                          f"(here {e.reducer.name!r}); compute them as a stage of their own")

    def visit(self, expr, *args):
        """The work of ``self(expr, *args)``: its result, or a generator for :func:`run`."""
        return self.method_for(type(expr), expr)(expr, *args)


def bottom_up(root, children_of, combine, whole=None):
    """``combine(node, [results of its children])`` for ``root``, children first, on an
    explicit stack (no recursion). A node for which ``whole(node)`` holds is combined with
    no child results, its children unvisited; a node shared within ``root`` is combined
    once.

    >>> from tegrad.ir.expr import Var
    >>> bottom_up(Var("i") * 2 + 1, children, lambda node, kids: 1 + sum(kids))
    5
    """
    results = {}
    keep = []  # nodes stay alive while their ids key ``results``
    # entries (node, None): to expand; (node, its children): to combine, the children
    # combined (they were pushed above it)
    stack = [(root, None)]
    pop, push = stack.pop, stack.append
    while stack:
        node, kids = pop()
        key = id(node)
        if key in results:
            continue
        if kids is None:
            if whole is not None and whole(node):
                results[key] = combine(node, [])
                keep.append(node)
                continue
            kids = children_of(node)
            push((node, kids))
            for c in reversed(kids):
                if id(c) not in results:
                    push((c, None))
            continue
        results[key] = combine(node, [results[id(c)] for c in kids])
        keep.append(node)
    return results[id(root)]


def rebuild(e, kids):
    """``e`` with its children (in :func:`children` order) replaced by ``kids``; ``e``
    itself when every child is the same object."""
    if all(k is c for k, c in zip(kids, children(e))):
        return e
    t = type(e)
    if t is Binary:
        return Binary(e.op, kids[0], kids[1], e.dtype)
    if t is Compare:
        return Compare(e.op, kids[0], kids[1])
    if t is Reduce:
        axes = tuple(ax if (lo is ax.lo and extent is ax.extent) else
                     IterVar(ax.var, lo, extent, ax.kind)
                     for ax, lo, extent in zip(e.axes, kids[1::2], kids[2::2]))
        rest = list(kids[1 + 2 * len(e.axes):])
        where = None if e.where is None else rest.pop(0)
        init = None if e.init is None else rest.pop(0)
        return Reduce(e.reducer, kids[0], axes, where, init, e.dtype)
    if t is TupleReduce:
        n = len(e.sources)
        axes = tuple(ax if (lo is ax.lo and extent is ax.extent) else
                     IterVar(ax.var, lo, extent, ax.kind)
                     for ax, lo, extent in zip(e.axes, kids[n::2], kids[n + 1::2]))
        where = None if e.where is None else kids[n + 2 * len(e.axes)]
        return TupleReduce(e.reducer, tuple(kids[:n]), axes, where, e.index, e.dtype)
    return _REBUILD[t](e, kids)


_REBUILD = {
    Neg: lambda e, k: Neg(k[0], e.dtype), Not: lambda e, k: Not(k[0]),
    Cast: lambda e, k: Cast(k[0], e.dtype), And: lambda e, k: And(k[0], k[1]),
    Or: lambda e, k: Or(k[0], k[1]), Select: lambda e, k: Select(k[0], k[1], k[2], e.dtype),
    Call: lambda e, k: Call(e.name, tuple(k), e.dtype),
    Read: lambda e, k: Read(e.tensor, tuple(k), e.dtype),
}


class IdentityMapper(Mapper):
    """Rebuilds an expression bottom-up; returns the same node where nothing changed.

    It runs on an explicit stack: the node kinds a subclass leaves to this class are
    rebuilt from their children's results (under the same extra arguments, which carry
    a context) without recursion, and :meth:`finish` sees every node's result. A
    subclass's own ``map_<kind>`` recurses through ``self(child, ...)`` as it chooses;
    if it is a generator (``(yield self.visit(child, ...))``, see :func:`run`), the whole
    mapping runs on one explicit stack, with no recursion at any depth.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = getattr(cls, "map_itervar") is not IdentityMapper.map_itervar
        cls._rebuilt_here = frozenset(
            kind for kind, name in cls._method_names.items()
            if getattr(cls, name, None) is getattr(IdentityMapper, name, False)
            and not (own and kind in REDUCTIONS))
        cls._stepwise = any(inspect.isgeneratorfunction(getattr(cls, name, None))
                            for name in set(cls._method_names.values()))

    #: a :class:`NodeMemo` of results kept across calls (called without extra
    #: arguments, not stepwise), for a mapper whose result for a node depends on the
    #: node alone: a call within a call (a rewrite rule's result mapped again) then
    #: maps only the nodes it has not met. None: each call starts afresh.
    memo = None

    def finish(self, e, out):
        """The result for ``e``, given ``out`` (its rebuilt or mapped node)."""
        return out

    def __call__(self, e, *args):
        if self._stepwise:
            return run(self.visit(e, *args))
        here = self._rebuilt_here
        memo = None if args else self.memo

        def combine(node, kids):
            if memo is not None:
                hit = memo.get(node)
                if hit is not None:
                    return hit
            if type(node) in here:
                out = self.finish(node, rebuild(node, kids))
            else:
                out = self.finish(node, self.method_for(type(node), node)(node, *args))
            if memo is not None:
                memo[node] = out
            return out

        def whole(node):
            return type(node) not in here or (memo is not None and memo.get(node) is not None)
        return bottom_up(e, children, combine, whole=whole)

    def visit(self, e, *args):
        if type(e) in self._rebuilt_here:
            return self._rebuilt(e, args)
        out = self.method_for(type(e), e)(e, *args)
        return out if type(self).finish is IdentityMapper.finish else self._finished(e, out)

    def _rebuilt(self, e, args):
        kids = []
        for c in children(e):
            kids.append((yield self.visit(c, *args)))
        return self.finish(e, rebuild(e, kids))

    def _finished(self, e, out):
        if type(out) is GeneratorType:
            out = yield from out
        return self.finish(e, out)

    def map_const(self, e, *args):
        return e

    map_var = map_const

    def map_binary(self, e, *args):
        return rebuild(e, [self(c, *args) for c in children(e)])

    map_neg = map_compare = map_and = map_or = map_not = map_select = map_cast = \
        map_call = map_read = map_binary

    def map_itervar(self, iv, *args):
        lo, extent = self(iv.lo, *args), self(iv.extent, *args)
        return iv if (lo is iv.lo and extent is iv.extent) else IterVar(iv.var, lo, extent, iv.kind)

    def map_reduce(self, e, *args):
        axes = tuple(self.map_itervar(ax, *args) for ax in e.axes)
        source = self(e.source, *args)
        where = None if e.where is None else self(e.where, *args)
        init = None if e.init is None else self(e.init, *args)
        if (source is e.source and where is e.where and init is e.init
                and all(x is y for x, y in zip(axes, e.axes))):
            return e
        return Reduce(e.reducer, source, axes, where, init, e.dtype)

    def map_tuple_reduce(self, e, *args):
        axes = tuple(self.map_itervar(ax, *args) for ax in e.axes)
        sources = tuple(self(c, *args) for c in e.sources)
        where = None if e.where is None else self(e.where, *args)
        if (where is e.where and all(x is y for x, y in zip(sources, e.sources))
                and all(x is y for x, y in zip(axes, e.axes))):
            return e
        return TupleReduce(e.reducer, sources, axes, where, e.index, e.dtype)


IdentityMapper._rebuilt_here = frozenset(IdentityMapper._method_names)
IdentityMapper._stepwise = False


class ChildrenMapper(Mapper):
    """The direct sub-expressions of a node, in the order combine mappers receive them."""

    def __init__(self):
        # one bound method per class: every walk calls this once per node
        self._table = {cls: getattr(self, name) for cls, name in self._method_names.items()}

    def __call__(self, e):
        method = self._table.get(type(e))
        return method(e) if method is not None else self.method_for(type(e), e)(e)

    def map_const(self, e):
        return ()

    map_var = map_const

    def map_binary(self, e):
        return (e.a, e.b)

    map_compare = map_and = map_or = map_binary

    def map_neg(self, e):
        return (e.a,)

    map_not = map_cast = map_neg

    def map_select(self, e):
        return (e.cond, e.true_value, e.false_value)

    def map_call(self, e):
        return e.args

    def map_read(self, e):
        return e.indices

    def map_reduce(self, e):
        out = [e.source]
        for ax in e.axes:
            out += [ax.lo, ax.extent]
        if e.where is not None:
            out.append(e.where)
        if e.init is not None:
            out.append(e.init)
        return tuple(out)

    def map_tuple_reduce(self, e):
        out = list(e.sources)
        for ax in e.axes:
            out += [ax.lo, ax.extent]
        if e.where is not None:
            out.append(e.where)
        return tuple(out)


_CHILDREN = ChildrenMapper()


def children(e):
    """The direct sub-expressions of ``e`` (reduce axis bounds included)."""
    return _CHILDREN(e)


class CombineMapper(Mapper):
    """Post-order and iterative: ``self(e)`` is ``map_<kind>(e, *results of its children)``.

    Children come in the order of :class:`ChildrenMapper` (a subclass adding a node kind
    extends ``children_of`` as well). No Python recursion, so an expression 10,000
    operations deep is fine; a sub-expression shared within ``e`` is combined once.
    """

    children_of = _CHILDREN

    def __call__(self, e):
        return bottom_up(e, self.children_of,
                         lambda node, kids: self.method_for(type(node), node)(node, *kids))


def walk(e, children_of=children):
    """Every node of ``e`` once (pre-order, shared sub-trees visited once);
    ``children_of`` gives a node's children (a code generator's knows its own kinds)."""
    seen = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(children_of(node)))


def free_var_names(e):
    """Names of the variables of ``e`` not bound by one of its reductions.

    >>> from tegrad.ir.expr import Var
    >>> sorted(free_var_names(Var("i") * 2 + Var("j")))
    ['i', 'j']
    """
    out, seen = set(), set()
    stack = [(e, frozenset())]
    while stack:
        node, bound = stack.pop()
        key = (id(node), bound)
        if key in seen:
            continue
        seen.add(key)
        t = type(node)
        if t is Var:
            if node.name not in bound:
                out.add(node.name)
        elif t is Reduce or t is TupleReduce:
            # each axis's bounds see the axes before it; sources and where see all of them
            inner = bound
            for ax in node.axes:
                stack += [(ax.lo, inner), (ax.extent, inner)]
                inner = inner | {ax.name}
            stack.extend((s, inner) for s in _sources(node))
            if node.where is not None:
                stack.append((node.where, inner))
            if t is Reduce and node.init is not None:
                stack.append((node.init, bound))
        else:
            stack.extend((c, bound) for c in children(node))
    return out


def reduce_axis_names(e):
    """Names of all reduce axes bound anywhere inside ``e``."""
    return {ax.name for node in walk(e) if type(node) in REDUCTIONS for ax in node.axes}


def _sources(e):
    """The reduced expressions of a reduction (one, or a tuple's)."""
    return e.sources if type(e) is TupleReduce else (e.source,)


def all_var_names(e):
    """Every variable name occurring in ``e``, bound or free."""
    names = {node.name for node in walk(e) if type(node) is Var}
    return names | reduce_axis_names(e)


def tensors_read(e):
    """The tensors read by ``e``, in order of first appearance."""
    out = {}
    for node in walk(e):
        if type(node) is Read:
            out.setdefault(id(node.tensor), node.tensor)
    return list(out.values())


class Substitutor(IdentityMapper):
    """Replace free variables by expressions, capture-avoiding.

    A reduction's own axes shadow the mapping; an axis whose name occurs free in a
    replacement is renamed first, so the replacement's variable is not captured.
    """

    def __init__(self, mapping):
        self.mapping = mapping
        self._replacement_names = None

    def map_var(self, e, *args):
        return self.mapping.get(e.name, e)

    def _names_in_replacements(self):
        if self._replacement_names is None:
            names = set()
            for v in self.mapping.values():
                names |= free_var_names(v)
            self._replacement_names = names
        return self._replacement_names

    def map_reduce(self, e, *args):
        axis_names = {ax.name for ax in e.axes}
        clashes = axis_names & self._names_in_replacements()
        if clashes:
            e = _rename_axes(e, clashes, axis_names | self._names_in_replacements()
                             | all_var_names(e))
            axis_names = {ax.name for ax in e.axes}
        shadowed = axis_names & self.mapping.keys()
        if not shadowed:
            return super().map_reduce(e) if type(e) is Reduce else super().map_tuple_reduce(e)
        inner = Substitutor({k: v for k, v in self.mapping.items() if k not in shadowed})
        axes = tuple(inner.map_itervar(ax) for ax in e.axes)
        return _rebuilt_reduction(e, axes, inner, self)

    map_tuple_reduce = map_reduce


def _rebuilt_reduction(e, axes, inner, outer=None):
    """The reduction ``e`` over ``axes``, ``inner`` applied to its sources and where,
    ``outer`` (when given) to its init."""
    where = None if e.where is None else inner(e.where)
    if type(e) is TupleReduce:
        return TupleReduce(e.reducer, tuple(inner(c) for c in e.sources), axes, where,
                           e.index, e.dtype)
    init = e.init if (outer is None or e.init is None) else outer(e.init)
    return Reduce(e.reducer, inner(e.source), axes, where, init, e.dtype)


def _rename_axes(e, names, taken):
    axes, renames = rename_axes(e.axes, taken, only=names)
    return _rebuilt_reduction(e, axes, Substitutor(renames))


def rename_axes(axes, taken, *, only=None, kind=None):
    """Copies of ``axes`` named apart from ``taken`` and from each other.

    Every axis is renamed (to a fresh name: its own when free), or only those named in
    ``only``; later axes' bounds follow the renaming; ``kind`` replaces the axes' kind.
    Returns ``(new axes, {old name: new Var})`` for the axes considered.

    >>> from tegrad.ir.expr import Const
    >>> k = IterVar(Var("k"), Const(0, "int32"), Const(4, "int32"))
    >>> axes, renames = rename_axes([k], {"k"})
    >>> axes[0].name, str(renames["k"])
    ('k_1', 'k_1')
    """
    taken = set(taken)
    renames, out = {}, []
    for ax in axes:
        considered = only is None or ax.name in only
        name = fresh_name(ax.name, taken) if considered else ax.name
        taken.add(name)
        lo = substitute(ax.lo, renames) if renames else ax.lo
        extent = substitute(ax.extent, renames) if renames else ax.extent
        new_kind = kind or ax.kind
        if name == ax.name and lo is ax.lo and extent is ax.extent and new_kind == ax.kind:
            out.append(ax)
        else:
            out.append(IterVar(Var(name, ax.var.dtype), lo, extent, new_kind))
        if considered:
            renames[ax.name] = out[-1].var
    return tuple(out), renames


def substitute(e, mapping):
    """Replace the free variables named in ``mapping`` (name or Var -> expression).

    >>> from tegrad.ir.expr import Var
    >>> str(substitute(Var("i") + 1, {"i": Var("j") * 2}))
    'j * 2 + 1'
    """
    norm = {(k.name if isinstance(k, (Var, IterVar)) else k): as_expr(v)
            for k, v in mapping.items()}
    if not norm:
        return e
    return Substitutor(norm)(e)


def fresh_name(base, taken, counters=None):
    """``base`` or ``base_1``, ``base_2``, ... whichever is not in ``taken``.

    ``counters`` (a dict kept by a caller asking for many names from a set that only
    grows) remembers, per base, where the search stopped, so that the n-th name of one
    base costs O(1) instead of O(n); the names are the same."""
    if base not in taken:
        return base
    n = 1 if counters is None else counters.get(base, 1)
    while f"{base}_{n}" in taken:
        n += 1
    if counters is not None:
        counters[base] = n
    return f"{base}_{n}"
