"""The C interface of an exported kernel: its parameters, its workspace and its error codes.

An exported entry point ``NAME`` is the C function

    int NAME(const T0 *in0, ..., T *out0, ..., void *workspace);

with one pointer per input and per output of the kernel, in the kernel's order (inputs
then outputs), each a dense C-ordered array, and a caller-provided ``workspace`` of
``NAME_WORKSPACE_BYTES`` bytes in which every temporary of the kernel lives at an offset
that is a multiple of :data:`WORKSPACE_ALIGNMENT`, so nothing is allocated inside. It
returns 0 on success; a positive code names the failed run-time check of the kernel (its
kind and tensor); a negative code ``-(p + 1)`` says that pointer parameter ``p`` (the
workspace is the last) is NULL or not aligned as the header requires.

>>> from tegrad.codegen.loops.nodes import Buffer, Block, Kernel
>>> x = Buffer("x", (2, 3), "float32", "input")
>>> y = Buffer("y", (2,), "float32", "output")
>>> t = Buffer("t", (5,), "float64", "temp")
>>> entry = entry_point("f", Kernel("f", (x, y), (t,), Block(())), {1: ("index_out_of_range", "x")})
>>> [p.c_decl for p in entry.params], entry.workspace_bytes
(['const float *x', 'float *y', 'void *workspace'], 64)
>>> entry.error_message(1), entry.error_message(-1)
("index out of range in tensor 'x'", "pointer argument 'x' is NULL or not aligned to 64 bytes")
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.loops.errors import c_error_text

#: every temporary starts at a multiple of this many bytes of the workspace (a cache line,
#: and enough for any vector load)
WORKSPACE_ALIGNMENT = 64

#: dtype -> (C type, bytes per element); float16 travels as its IEEE binary16 bits and bool
#: as one byte holding 0 or 1 (numpy's layouts)
C_TYPES = {
    "float16": ("uint16_t", 2), "float32": ("float", 4), "float64": ("double", 8),
    "int8": ("int8_t", 1), "int16": ("int16_t", 2), "int32": ("int32_t", 4),
    "int64": ("int64_t", 8), "uint8": ("uint8_t", 1), "uint16": ("uint16_t", 2),
    "uint32": ("uint32_t", 4), "uint64": ("uint64_t", 8), "bool": ("uint8_t", 1),
}


#: names a parameter or entry point cannot have: C's and C++'s keywords (the header is
#: valid C and C++) and the workspace parameter's name
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum
extern float for goto if inline int long register restrict return short signed sizeof static
struct switch typedef union unsigned void volatile while bool true false _Bool workspace
alignas alignof asm catch class constexpr delete explicit export friend mutable namespace new
noexcept nullptr operator private protected public template this throw try typeid typename
using virtual""".split())

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_MATH = """acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2
expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ldexp lgamma log log10 log1p log2 logb
lrint lround modf nan nearbyint nextafter pow remainder rint round roundeven scalbn sin sinh
sqrt tan tanh tgamma trunc""".split()

#: functions of libc and libm that generated code may call (LLVM turns intrinsics into
#: some of them): an entry point with one of these names would replace it
RESERVED_NAMES = frozenset(_MATH + [f + suffix for f in _MATH for suffix in "fl"] + """
memcpy memmove memset memcmp bcmp malloc calloc realloc free abort exit main printf
sincos sincosf __errno_location syscall pthread_create pthread_detach pthread_self""".split())


#: the longest identifier made from a name: C promises 63 significant characters, and an
#: argument's macros add the entry point's name before it and up to 8 characters after
IDENT_LIMIT = 40


def c_identifier(name):
    """``name`` made a valid C (and C++) identifier: a character beyond ASCII becomes
    ``u`` and its hexadecimal code point, others but letters, digits and ``_`` become
    ``_``, runs of ``_`` one (C++ reserves ``__``), a C keyword
    or a leading digit gets an ``_``, a leading ``_`` and capital a ``t``; a name longer
    than :data:`IDENT_LIMIT` is cut and ends in a hash of the whole name (names differing
    anywhere get different identifiers). Different names may still meet (``a b`` and
    ``a_b``): :func:`entry_point` makes its parameters distinct.

    >>> c_identifier("d(w1)"), c_identifier("int"), c_identifier("0x"), c_identifier("μ x")
    ('d_w1_', 'int_', '_0x', 'u3bc_x')
    >>> c_identifier("a" * 1000 + "b")[-12:], len(c_identifier("a" * 1000 + "b"))
    ('aaa_3766e1b0', 40)
    """
    ident = re.sub(r"[^\x00-\x7f]", lambda m: f"u{ord(m.group()):x}", name)
    ident = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", ident)) or "_"
    if ident[0].isdigit():
        ident = "_" + ident
    if re.match(r"_[A-Z]", ident):
        ident = "t" + ident
    if len(ident) > IDENT_LIMIT:
        digest = hashlib.blake2s(name.encode("utf-8", "surrogatepass"),
                                 digest_size=4).hexdigest()
        ident = f"{ident[:IDENT_LIMIT - len(digest) - 1].rstrip('_')}_{digest}"
    if ident in _C_KEYWORDS:
        ident += "_"
    return ident


def check_entry_name(name):
    """Raise :class:`ExportError` unless ``name`` can name an exported C function."""
    if not isinstance(name, str) or not _IDENT.match(name) or name in _C_KEYWORDS:
        raise ExportError(f"entry point name {name!r} is not a C identifier "
                          f"(letters, digits and '_', not starting with a digit, no C keyword)")
    if name in RESERVED_NAMES:
        raise ExportError(f"entry point name {name!r} is a C library function the exported "
                          f"code may call; choose another name")


@dataclass(frozen=True)
class Param:
    """One pointer parameter: the buffer it passes (``None`` for the workspace)."""

    name: str          # the tensor's name
    ident: str         # its C identifier
    dtype: str
    shape: tuple
    role: str          # "input", "output" or "workspace"

    @property
    def c_type(self):
        return "void" if self.role == "workspace" else C_TYPES[self.dtype][0]

    @property
    def c_decl(self):
        const = "const " if self.role == "input" else ""
        return f"{const}{self.c_type} *{self.ident}"

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * C_TYPES[self.dtype][1]


@dataclass(frozen=True)
class EntryPoint:
    """The exported form of one kernel: ``name``, its pointer ``params`` (arguments in
    order, then the workspace), the workspace offset of each temporary, the workspace
    size, the alignment the kernel function assumes of buffer pointers (the entry point
    requires at least that, and each element's size, of every argument, and at least
    :data:`WORKSPACE_ALIGNMENT` of the workspace), and the check codes of the kernel
    function (``code -> (error kind, tensor name)``), and the number of threads its
    parallel loops run on (1: no threads)."""

    name: str
    kernel_name: str
    params: tuple
    temp_offsets: tuple
    workspace_bytes: int
    alignment: int
    checks: tuple      # sorted ((code, kind, tensor), ...)
    messages: tuple = ()  # ((code, what the failed check reports), ...) where it says more
    threads: int = 1

    @property
    def args(self):
        return self.params[:-1]

    def error_message(self, code):
        """The text ``NAME_error_string(code)`` returns."""
        if code == 0:
            return "success"
        if code < 0 and -code <= len(self.params):
            p = self.params[-code - 1]
            what = "workspace" if p.role == "workspace" else f"pointer argument {p.name!r}"
            return f"{what} is NULL or not aligned to {self.alignment_of(p)} bytes"
        for c, message in self.messages:
            if c == code:
                return message
        for c, kind, tensor in self.checks:
            if c == code:
                return c_error_text(kind, tensor)
        return "unknown error code"

    @property
    def max_alignment(self):
        """An alignment that suffices for every pointer parameter."""
        params = self.params if self.workspace_bytes else self.args
        return max([self.alignment_of(p) for p in params] + [1])

    def alignment_of(self, param):
        if param.role == "workspace":
            return max(self.alignment, WORKSPACE_ALIGNMENT)
        return max(self.alignment, C_TYPES[param.dtype][1])


def entry_point(name, kernel, checks, *, alignment=WORKSPACE_ALIGNMENT, extra=(), threads=1,
                workspace=None):
    """The :class:`EntryPoint` exporting ``kernel`` as ``name``; ``checks`` maps each
    positive status code of the kernel function to ``(error kind, tensor name)`` or
    ``(error kind, tensor name, message)`` (what the error string says, when not None);
    ``alignment`` is what the kernel function assumes of each buffer pointer; ``extra``
    are buffers the kernel function takes after its temporaries (carved from the
    workspace like them); ``threads``: the threads its parallel loops run on;
    ``workspace``: ``(offsets, nbytes)``, the backend's layout of the temporaries and
    ``extra`` in the workspace (see :class:`~.interface.KernelModule`), else one after
    another."""
    check_entry_name(name)
    params, seen = [], {"workspace"}
    for buf in kernel.args:
        if buf.scope not in ("input", "output"):
            raise ExportError(f"kernel {kernel.name!r}: argument {buf.name!r} has scope "
                              f"{buf.scope!r}; arguments are inputs or outputs")
        if buf.dtype not in C_TYPES:
            raise ExportError(f"kernel {kernel.name!r}: buffer {buf.name!r} has dtype "
                              f"{buf.dtype!r}, which has no C type")
        ident = c_identifier(buf.name)
        while ident in seen:
            ident += "_"
        seen.add(ident)
        params.append(Param(buf.name, ident, buf.dtype, tuple(buf.shape), buf.scope))
    params.append(Param("workspace", "workspace", "uint8", (), "workspace"))
    offsets, end = [], 0
    owned = tuple(kernel.temps) + tuple(extra)
    for buf in owned:
        if buf.dtype not in C_TYPES:
            raise ExportError(f"kernel {kernel.name!r}: temporary {buf.name!r} has dtype "
                              f"{buf.dtype!r}, which has no C type")
        offsets.append(end)
        end = _round_up(end + buf.size * C_TYPES[buf.dtype][1], WORKSPACE_ALIGNMENT)
    if workspace is not None:
        offsets, end = _checked_layout(kernel, owned, *workspace)
    rows = []
    messages = []
    for code, (kind, tensor, *message) in sorted(dict(checks).items()):
        if not (isinstance(code, int) and 0 < code < 2**31):
            raise ExportError(f"kernel {kernel.name!r}: check code {code!r} must be a "
                              f"positive 32-bit int")
        rows.append((code, kind, tensor))
        if message and message[0]:
            messages.append((code, message[0]))
    if not (isinstance(alignment, int) and alignment >= 1 and alignment & (alignment - 1) == 0):
        raise ExportError(f"kernel {kernel.name!r}: alignment {alignment!r} is not a power of 2")
    return EntryPoint(name, kernel.name, tuple(params), tuple(offsets), end, alignment,
                      tuple(rows), tuple(messages), int(threads))


def _checked_layout(kernel, owned, offsets, nbytes):
    """``(offsets, nbytes)`` of a backend's workspace layout of the buffers ``owned``,
    checked: one aligned offset per buffer, each buffer inside the workspace."""
    offsets = list(offsets)
    if len(offsets) != len(owned):
        raise ExportError(f"kernel {kernel.name!r}: the workspace layout gives "
                          f"{len(offsets)} offsets for {len(owned)} buffers")
    for buf, at in zip(owned, offsets):
        size = buf.size * C_TYPES[buf.dtype][1]
        if not (isinstance(at, int) and at >= 0 and at % WORKSPACE_ALIGNMENT == 0
                and at + size <= nbytes):
            raise ExportError(f"kernel {kernel.name!r}: buffer {buf.name!r} at workspace "
                              f"offset {at!r} is not aligned to {WORKSPACE_ALIGNMENT} bytes "
                              f"or not inside its {nbytes} bytes")
    return offsets, _round_up(nbytes, WORKSPACE_ALIGNMENT)


def _round_up(n, multiple):
    return -(-n // multiple) * multiple
