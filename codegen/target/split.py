"""A module's IR text cut into modules that compile apart (:func:`split_module`), so that
LLVM optimises and generates the parts of a large kernel on several cores at once
(:mod:`.concurrent`), linked again into one engine by the JIT.

The identity kept: the parts define every function and global the module defines, once,
with the same bodies and initialisers, and declare what they use from the others, so
linked together they are the module. What changes: a function another part uses is no
longer ``internal`` (it is found by name when the parts are linked), and LLVM
no longer optimises across parts (a kernel's parts are ``noinline`` functions already,
see :func:`tegrad.codegen.llvm.emit.kernel_parts`).

What stays together: an ``alwaysinline`` function and its callers, and the functions
sharing a global (the global is defined once, beside them). Declarations and metadata
are copied into every part (unused ones cost nothing).

The text is LLVM IR as llvmlite prints it: a header, then top-level lines (a
``declare``, a global on one line, a metadata node), and functions from ``define`` to a
line ``}``.

>>> text = '''target triple = "x86_64-unknown-linux-gnu"
... declare float @"llvm.sqrt.f32"(float %".1")
... define internal float @"f"(float %".1") noinline
... {
... entry:
...   %".3" = call float @"llvm.sqrt.f32"(float %".1")
...   ret float %".3"
... }
... define float @"g"(float %".1")
... {
... entry:
...   %".3" = call float @"f"(float %".1")
...   ret float %".3"
... }'''
>>> parts = split_module(text, 2)
>>> len(parts), ['define internal' in p for p in parts]
(2, [False, False])
>>> print(parts[1].splitlines()[2])
declare float @"f"(float %".1")
"""
from __future__ import annotations

import re

_SYMBOL = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w$.]+)')
_DEFINE = re.compile(r'^define (?:(?:internal|private) )?')


class _Entity:
    """A function (its ``define`` line to its ``}``) or a global (one line) the module
    defines: ``name``, ``lines``, the symbols it ``uses``, ``inline``: an
    ``alwaysinline`` function, and its ``size`` in characters."""

    def __init__(self, kind, lines):
        self.kind, self.lines = kind, lines
        self.name = _SYMBOL.search(lines[0]).group(1)
        self.uses = set(_SYMBOL.findall("\n".join(lines))) - {self.name}
        self.inline = kind == "function" and "alwaysinline" in lines[0][_params_end(lines[0]):]
        self.size = sum(len(line) + 1 for line in lines)


def _params_end(line):
    """The index just past the closing parenthesis of a ``define`` or ``declare`` line's
    parameter list (which follows the function's name)."""
    start = line.index("(", _SYMBOL.search(line).end())
    depth = 0
    for k in range(start, len(line)):
        if line[k] == "(":
            depth += 1
        elif line[k] == ")":
            depth -= 1
            if depth == 0:
                return k + 1
    raise ValueError(f"unbalanced parameter list: {line[:200]}")


def _parse(text):
    """``(header lines, declaration and metadata lines, entities)`` of a module's text."""
    header, shared, entities = [], [], []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("define "):
            end = k
            while lines[end] != "}":
                end += 1
            entities.append(_Entity("function", lines[k:end + 1]))
            k = end + 1
            continue
        if line.startswith("@"):
            entities.append(_Entity("global", [line]))
        elif line.startswith(("declare ", "!", "attributes ")):
            shared.append(line)
        elif line.strip():
            header.append(line)
        k += 1
    return header, shared, entities


def _clusters(entities):
    """The entities in groups that must stay in one part (see the module docstring):
    union of each ``alwaysinline`` function with its users and of each global with its
    users."""
    parent = list(range(len(entities)))

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k
    index = {e.name: k for k, e in enumerate(entities)}
    for k, e in enumerate(entities):
        for name in e.uses:
            j = index.get(name)
            if j is not None and (entities[j].kind == "global" or entities[j].inline):
                parent[root(k)] = root(j)
    groups = {}
    for k in range(len(entities)):
        groups.setdefault(root(k), []).append(k)
    return list(groups.values())


def _declaration(entity):
    """The declaration of a function another part defines (its ``define`` line to the
    end of its parameters). (A global is never used apart: it stays with its users.)"""
    line = _DEFINE.sub("", entity.lines[0], count=1)
    return "declare " + line[:_params_end(line)]


def _external(entity):
    """A function's lines with its linkage external (another part uses it; a global
    never is, see :func:`_declaration`)."""
    return [_DEFINE.sub("define ", entity.lines[0], count=1)] + entity.lines[1:]


def split_module(text, parts):
    """The module ``text`` as at most ``parts`` module texts that, linked together, define
    what it defines (see the module docstring); its functions and globals are dealt to
    the parts largest group first, each to the part holding the fewest characters so
    far. Fewer parts when it has fewer groups; ``[text]`` when one."""
    header, shared, entities = _parse(text)
    clusters = sorted(((sum(entities[k].size for k in c), c) for c in _clusters(entities)),
                      key=lambda sized: -sized[0])
    if parts < 2 or len(clusters) < 2:
        return [text]
    count = min(parts, len(clusters))
    loads, members = [0] * count, [[] for _ in range(count)]
    for size, cluster in clusters:
        p = loads.index(min(loads))
        members[p].extend(cluster)
        loads[p] += size
    part_of = {entities[k].name: p for p, ks in enumerate(members) for k in ks}
    used_apart = {name for p, ks in enumerate(members) for k in ks
                  for name in entities[k].uses if part_of.get(name, p) != p}
    out = []
    for p, ks in enumerate(members):
        ks = sorted(ks)  # the module's own order
        mine = {entities[k].name for k in ks}
        wanted = {name for k in ks for name in entities[k].uses
                  if name in part_of and name not in mine}
        lines = list(header) + [line for line in shared if not line.startswith("!")]
        lines += [_declaration(e) for e in entities if e.name in wanted]
        for k in ks:
            e = entities[k]
            lines += _external(e) if e.name in used_apart else e.lines
        lines += [line for line in shared if line.startswith("!")]
        out.append("\n".join(lines) + "\n")
    return out


__all__ = ["split_module"]
