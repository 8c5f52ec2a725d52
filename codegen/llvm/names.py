"""Names of LLVM values and symbols made from the names users give tensors and loops.

A tensor may be called anything (``"μ"``, a 2,000-character name, ``"a b"``), but LLVM
names have limits: llvmlite looks symbols up as ASCII, and LLVM truncates a local name
beyond 1,024 characters, so two long names sharing their first 1,024 characters become
one (``redefinition of argument``). Every name the emitter gives LLVM goes through
:func:`llvm_name`: short, ASCII, and distinct for distinct long names (a hash of the
whole name). Local names only help a reader of the IR (llvmlite makes repeated ones
distinct); a symbol's uniqueness comes from its prefix and counters, never from the
user's name alone.

>>> llvm_name("x"), llvm_name("d(w1)"), llvm_name("μ")
('x', 'd(w1)', 'u3bc.783da09b')
>>> len(llvm_name("a" * 2000)), llvm_name("a" * 2000) != llvm_name("a" * 1999 + "b")
(64, True)
"""
from __future__ import annotations

import hashlib
import re

#: the longest name the emitter gives an LLVM value or symbol (LLVM's own limit for local
#: names is 1,024; short names keep the IR readable)
NAME_LIMIT = 64

#: characters kept as they are: printable ASCII but the quote and the backslash, which
#: llvmlite would escape
_PLAIN = re.compile(r'^[ !#-\[\]-~]*$')
_OTHER = re.compile(r'[^ !#-\[\]-~]')


def llvm_name(name, limit=NAME_LIMIT):
    """``name`` as an LLVM value or symbol name: itself when it is printable ASCII (no
    quote or backslash) of at most ``limit`` (at least 16) characters; otherwise its ASCII form
    (other characters as their hexadecimal code point), cut to fit, then ``.`` and 8 hex
    digits of a hash of the whole name.

    >>> llvm_name('a"b')
    'a_22b.a80c356e'
    """
    if _PLAIN.match(name) and len(name) <= limit:
        return name
    digest = hashlib.blake2s(name.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    text = _OTHER.sub(lambda m: f"u{ord(m.group()):x}" if ord(m.group()) > 127
                      else f"_{ord(m.group()):x}", name)
    return f"{text[:limit - len(digest) - 1]}.{digest}"


__all__ = ["NAME_LIMIT", "llvm_name"]
