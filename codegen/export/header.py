"""The C header of an exported library: prototypes, shapes, dtypes, sizes, error codes.

>>> from tegrad.codegen.loops.nodes import Buffer, Block, Kernel
>>> from tegrad.codegen.export.abi import entry_point
>>> x = Buffer("x", (2, 3), "float32", "input")
>>> y = Buffer("y", (2,), "float32", "output")
>>> text = header_text("lib", [entry_point("f", Kernel("f", (x, y), (), Block(())), {})], "t")
>>> "int f(const float *x, float *y, void *workspace);" in text, "#define F_X_DIM1 3" in text
(True, True)
"""
from __future__ import annotations

import re

from tegrad.codegen.export.abi import c_identifier


def comment_text(text):
    """``text`` safe inside a C comment: ASCII (other characters as ``\\u`` escapes,
    like newlines and tabs) and never ending the comment.

    >>> print(comment_text("μ*/x"))
    \\u03bc*\\/x
    """
    ascii_text = text.encode("ascii", "backslashreplace").decode("ascii")
    ascii_text = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", ascii_text)
    return ascii_text.replace("*/", "*\\/")


def header_text(library, entries, target_description):
    """The header declaring every entry point of ``entries`` (a library called
    ``library``, built for ``target_description``)."""
    guard = f"TEGRAD_{c_identifier(library).upper()}_H"
    lines = [
        f"/* {library}.h: native code exported by tegrad for {target_description}.",
        " *",
        " * Each entry point takes one pointer per input and output (dense C-ordered arrays of",
        " * the shapes and dtypes below; float16 as its IEEE binary16 bits, bool as one byte 0/1)",
        " * and a caller-provided workspace of NAME_WORKSPACE_BYTES bytes (reused across calls;",
        " * its contents need not be kept; one workspace per concurrent call). Nothing is",
        " * allocated inside. Pointers aligned to NAME_ALIGNMENT bytes are accepted (C11",
        " * aligned_alloc or posix_memalign give such memory); the workspace may be NULL when",
        " * NAME_WORKSPACE_BYTES is 0, and so may an array of no elements. An entry point",
        " * returns 0 on success, a positive code for a failed run-time check (listed below,",
        " * named by NAME_error_string), or -(p + 1) when pointer parameter p (counting from 0,",
        " * the workspace last) is NULL or misaligned.",
        " * Depends only on libc and libm, and on libpthread when an entry point's NAME_THREADS",
        " * is above 1: its parallel loops then run on that many threads, started on the first",
        " * call and kept (spinning briefly, then asleep) for later calls until the process",
        " * exits. Calls from several threads at once are safe (their parallel loops take",
        " * turns); results do not depend on NAME_THREADS.",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
    ]
    for entry in entries:
        lines += [""] + _entry_lines(entry)
    lines += ["", "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _entry_lines(entry):
    prefix = entry.name.upper()
    # every macro name of the entry is distinct, whatever its tensors are called (a
    # tensor "workspace" would otherwise define PREFIX_WORKSPACE_BYTES twice)
    taken = {f"{prefix}_{what}" for what in ("ALIGNMENT", "WORKSPACE_BYTES", "THREADS",
                                             "NUM_INPUTS", "NUM_OUTPUTS")}
    macros = _unique_macros(prefix, [p.ident for p in entry.args], taken,
                            {p.ident: _ARRAY_MACROS + tuple(f"DIM{a}" for a in range(len(p.shape)))
                             for p in entry.args})
    shown = {p.ident: comment_text(repr(p.name)) for p in entry.args}
    width = min(max([len(s) for s in shown.values()] + [4]), 24)
    lines = [f"/* {entry.name}"]
    for role, title in (("input", "inputs"), ("output", "outputs")):
        params = [p for p in entry.args if p.role == role]
        lines.append(f" *   {title} (tensor, dtype, shape, C parameter, macros):"
                     + ("" if params else " none"))
        for p in params:
            shape = "[" + ", ".join(map(str, p.shape)) + "]"
            lines.append(f" *     {shown[p.ident]:<{width}}  {p.dtype:<8} {shape:<14} "
                         f"{p.c_decl}  ({macros[p.ident]}_*)")
    alignment = entry.max_alignment
    lines.append(f" *   workspace: {entry.workspace_bytes} bytes; every pointer aligned to "
                 f"{alignment} bytes suffices (the codes below say what each needs)")
    lines.append(" *   returns 0 (success) or:")
    for code in [c for c, _, _ in entry.checks] + [-(i + 1) for i in range(len(entry.params))]:
        lines.append(f" *     {code:>4}  {comment_text(entry.error_message(code))}")
    lines.append(" */")
    lines.append(f"#define {prefix}_ALIGNMENT {alignment}")
    lines.append(f"#define {prefix}_WORKSPACE_BYTES {entry.workspace_bytes}")
    lines.append(f"#define {prefix}_THREADS {entry.threads}")
    lines.append(f"#define {prefix}_NUM_INPUTS {sum(p.role == 'input' for p in entry.args)}")
    lines.append(f"#define {prefix}_NUM_OUTPUTS {sum(p.role == 'output' for p in entry.args)}")
    for p in entry.args:
        m = macros[p.ident]
        lines.append(f'#define {m}_DTYPE "{p.dtype}"')
        lines.append(f"#define {m}_NDIM {len(p.shape)}")
        for axis, extent in enumerate(p.shape):
            lines.append(f"#define {m}_DIM{axis} {extent}")
        lines.append(f"#define {m}_SIZE {p.size}")
        lines.append(f"#define {m}_BYTES {p.nbytes}")
    names = _unique_macros(f"{prefix}_ERROR",
                           [_error_key(kind, tensor) for _, kind, tensor in entry.checks], taken)
    defined = set()
    for code, kind, tensor in entry.checks:
        key = _error_key(kind, tensor)
        if key not in defined:  # a tensor checked at several places: its first code
            defined.add(key)
            lines.append(f"#define {names[key]} {code}")
    args = ", ".join(p.c_decl for p in entry.params)
    lines.append(f"int {entry.name}({args});")
    lines.append(f"const char *{entry.name}_error_string(int code);")
    return lines


def _error_key(kind, tensor):
    return c_identifier(f"{kind}_{tensor}")


#: the macros of each argument: ``NAME_DTYPE`` ... (and ``NAME_DIM0`` ... per axis)
_ARRAY_MACROS = ("DTYPE", "NDIM", "SIZE", "BYTES")


def _unique_macros(prefix, keys, taken, suffixes=None):
    """``{key: PREFIX_KEY}`` (upper case, no ``__``, which C++ reserves), each made
    distinct (``_2``, ``_3``...) from the names in ``taken``, as are the macros
    ``PREFIX_KEY_SUFFIX`` for ``suffixes[key]``; adds them all to ``taken``. A repeated
    key gets the first name.

    >>> _unique_macros("F", ["x", "X", "_0x", "int_"], {"F_X_SIZE"}, {"x": ("SIZE",)})
    {'x': 'F_X_2', 'X': 'F_X', '_0x': 'F_0X', 'int_': 'F_INT'}
    """
    out = {}
    for key in keys:
        if key in out:
            continue
        ends = (suffixes or {}).get(key, ())
        base = re.sub(r"_+", "_", f"{prefix}_{key.upper()}").rstrip("_")
        name, n = base, 1
        while name in taken or any(f"{name}_{end}" in taken for end in ends):
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        taken.update(f"{name}_{end}" for end in ends)
        out[key] = name
    return out
