"""Any name a user may give a tensor compiles: through tg.build (LLVM names are made
ASCII and short) and through tg.export (the header's identifiers are valid, distinct C
and C++ identifiers, and its comments say which tensor each parameter is)."""
import ctypes
import re
import shutil
import subprocess

import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen.export.abi import c_identifier
from tegrad.codegen.export.header import comment_text

LONG = "w" * 1023
#: names that differ only after their 1000th character
TWINS = ("v" * 1001 + "left", "v" * 1001 + "right")
AWKWARD = ["μ", "δ out", LONG, *TWINS, "int", "workspace", "a b", "a_b", "a*/b", "x-y!",
           "A", "a", "__x", "1st", "new\nline"]


def _program(names, shape=(3,)):
    """One placeholder per name, and two outputs: their weighted sum (a stage named
    ``names[0]``) and its square summed over a reduction axis of a long non-ASCII name
    (axes are named by identifiers), a stage named ``names[-1]``."""
    xs = [tg.placeholder(shape, name=n) for n in names]
    total = tg.compute(shape, lambda i: sum((x[i] * (k + 1) for k, x in enumerate(xs[1:])),
                                            xs[0][i]), name=names[0])
    r = tg.reduce_axis((0, shape[0]), name="ρ" * 1100)
    square = tg.compute((), lambda: tg.sum(total[r] * total[r], axis=r), name=names[-1])
    return xs, [total, square]


def _expected(feeds):
    total = feeds[0] + sum(f * (k + 1) for k, f in enumerate(feeds[1:]))
    return total, np.sum(total * total, dtype=np.float32)


def _feeds(n, shape=(3,)):
    rng = np.random.default_rng(n)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def test_build_with_any_names():
    xs, outputs = _program(AWKWARD)
    feeds = _feeds(len(xs))
    total, square = tg.build(xs, outputs)(*feeds)
    want_total, want_square = _expected(feeds)
    np.testing.assert_allclose(total, want_total, rtol=1e-6)
    np.testing.assert_allclose(square, want_square, rtol=1e-5)


def test_build_with_long_names_differing_late_and_a_long_kernel_name():
    # intermediate stages, a reduction's accumulator and loop names all from long names
    xs, outputs = _program([TWINS[0], TWINS[1], LONG + "μ"], shape=(70,))
    feeds = _feeds(3, (70,))
    f = tg.build(xs, outputs, name="ü" * 1500)
    total, square = f(*feeds)
    np.testing.assert_allclose(total, _expected(feeds)[0], rtol=1e-6)
    np.testing.assert_allclose(square, _expected(feeds)[1], rtol=1e-5)


def test_c_identifiers_are_valid_and_bounded():
    idents = [c_identifier(n) for n in AWKWARD]
    for ident in idents:
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}", ident), ident
        assert "__" not in ident and not re.match(r"_[A-Z]", ident), ident
    assert c_identifier(TWINS[0]) != c_identifier(TWINS[1])
    assert comment_text("a*/b\nμ") == "a*\\/b\\x0a\\u03bc"


def test_export_with_any_names(tmp_path):
    xs, outputs = _program(AWKWARD)
    result = tg.export(xs, outputs, tmp_path / "names")
    header = result.header_path.read_text()
    assert header.isascii()
    entry = result.entries[0]
    idents = [p.ident for p in entry.params]
    assert len(set(idents)) == len(idents)
    for p in entry.args:  # each parameter's line names its tensor
        line = next(line for line in header.splitlines() if f" *{p.ident}  (" in line)
        assert comment_text(repr(p.name)) in line
    macros = re.findall(r"^#define (\w+)", header, re.MULTILINE)
    assert len(set(macros)) == len(macros)
    assert not [m for m in macros if "__" in m]

    source = tmp_path / "use.c"
    source.write_text('#include "names.h"\nint main(void) { return NAMES_NUM_INPUTS; }\n')
    for compiler in (["-std=c99", "-pedantic"], ["-x", "c++"]):
        cc = shutil.which("cc")
        if cc is None:
            pytest.fail("no C compiler (cc) to check the header with")
        done = subprocess.run([cc, *compiler, "-Wall", "-Werror", "-c", str(source), "-o",
                               str(tmp_path / "use.o")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    # the library computes what the names say, in the order of the parameters
    assert result.library_path is not None, result.message
    lib = ctypes.CDLL(str(result.library_path))
    feeds = _feeds(len(xs))
    total, square = np.zeros(3, np.float32), np.zeros((), np.float32)
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in (*feeds, total, square)]
    assert lib.names(*pointers, None) == 0
    np.testing.assert_allclose(total, _expected(feeds)[0], rtol=1e-6)
    np.testing.assert_allclose(square, _expected(feeds)[1], rtol=1e-5)
