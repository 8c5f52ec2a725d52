"""The run-time error table (``tegrad.codegen.loops.errors``) is complete: every kind the
loop IR's checks and the emitter report has its exception, its Python text and its C
text, and each layer shows a kind from the table (an exported header never prints a raw
kind name)."""
import pathlib
import re

import pytest

import tegrad as tg
from tegrad.codegen.export.abi import entry_point
from tegrad.codegen.llvm.emit import RARE_BRANCH
from tegrad.codegen.loops.errors import CHECK_KINDS, ERRORS, c_error_text, status_error
from tegrad.codegen.loops.nodes import ERROR_KINDS, Block, Buffer, Check, Kernel
from tegrad.codegen.runtime.executable import status_error as runtime_status_error
from tegrad.ir.expr import Const

CODEGEN = pathlib.Path(tg.codegen.__file__).parent


def reported_kinds():
    """The kind literals the code passes to the emitter's ``fail_unless`` or to a
    ``Check`` node."""
    kinds = set()
    for path in CODEGEN.rglob("*.py"):
        text = path.read_text()
        kinds |= set(re.findall(r'fail_unless\([^,]+,\s*"(\w+)"', text))
        # a Check's kind: the first snake_case literal among its arguments
        for call in re.finditer(r'\bCheck\(', text):
            found = re.search(r'"([a-z]+(?:_[a-z]+)+)"', text[call.end():call.end() + 300])
            if found:
                kinds.add(found.group(1))
    return kinds


def test_every_reported_kind_is_in_the_table():
    kinds = reported_kinds()
    assert {"index_out_of_range", "division_by_zero"} <= kinds
    assert kinds - {RARE_BRANCH} <= set(ERRORS), kinds - set(ERRORS)
    assert set(ERROR_KINDS) == set(CHECK_KINDS) <= set(ERRORS)


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_each_kind_has_an_exception_a_python_text_and_a_c_text(kind):
    e = ERRORS[kind]
    assert issubclass(e.exception, tg.TegradError)
    error = status_error(kind, "w")
    assert type(error) is e.exception and "'w'" in str(error)
    assert str(status_error(kind, "w", "given text")) == "given text"
    assert c_error_text(kind, "w") == f"{e.c_text} 'w'" and kind not in e.c_text
    assert runtime_status_error is status_error


@pytest.mark.parametrize("kind", sorted(ERRORS))
def test_an_exported_entry_names_each_kind_by_its_c_text(kind):
    x = Buffer("x", (2,), "float32", "input")
    y = Buffer("y", (2,), "float32", "output")
    entry = entry_point("f", Kernel("f", (x, y), (), Block(())), {1: (kind, "x")})
    assert entry.error_message(1) == f"{ERRORS[kind].c_text} 'x'"


def test_a_check_node_takes_only_the_tables_kinds():
    for kind in CHECK_KINDS:
        assert Check(Const(True, "bool"), kind, "x").error == kind
    with pytest.raises(ValueError, match="no_such_kind"):
        Check(Const(True, "bool"), "no_such_kind", "x")
