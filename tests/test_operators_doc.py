"""docs/operators.md has one row per operator of tegrad.ops and tegrad.nn, each with a
PyTorch equivalent (or a reason there is none) that names attributes PyTorch has; the
table of equivalents in docs/operators_table.py covers exactly the operators. Nothing
here costs a gradient: regenerating the tables is ``python docs/operators_table.py``."""
import importlib.util
import pathlib
import re

import pytest

from tegrad import nn, ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operators.md"


def _generator():
    spec = importlib.util.spec_from_file_location("operators_table",
                                                  ROOT / "docs" / "operators_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
NAMES = list(ops.__all__) + list(nn.__all__)
COLUMNS = ["operator", "signature", "PyTorch", "gradient / forward", "compiled", "attributes"]


def _rows():
    """``{name: [row cells, ...]}`` of the tables between the generator's markers."""
    text = DOC.read_text()
    start, stop = text.index(GENERATOR.BEGIN), text.index(GENERATOR.END)
    rows = {}
    for line in text[start:stop].splitlines():
        match = re.fullmatch(r"\| `(\w+)` \| (.*) \|", line)
        if match:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", match.group(2))]
            rows.setdefault(match.group(1), []).append(cells)
    return rows


ROWS = _rows()


def test_every_operator_has_exactly_one_row():
    counts = {name: len(ROWS.get(name, [])) for name in NAMES}
    assert not {n: c for n, c in counts.items() if c != 1}, "operators without exactly one row"
    assert not set(ROWS) - set(NAMES), "rows naming no operator"


def test_every_row_is_filled_in():
    for name, [cells] in ROWS.items():
        assert len(cells) == len(COLUMNS) - 1, name
        signature, pytorch, cost, compiled, _ = cells
        assert pytorch, f"{name}: empty PyTorch cell"
        assert signature.startswith("`(") and signature.endswith(")`"), name
        assert cost == "no derivative" or re.fullmatch(r"\d+\.\d\d(-\d+\.\d\d)?", cost), name
        assert compiled, name


def test_the_equivalents_cover_exactly_the_operators():
    assert set(GENERATOR.PYTORCH) == set(NAMES)
    assert set(GENERATOR.NOTES) == set(NAMES)
    assert all(text.strip() for text in GENERATOR.PYTORCH.values())


def test_the_doc_shows_the_equivalents_of_the_generator():
    for name, [cells] in ROWS.items():
        assert cells[1] == GENERATOR._pytorch_cell(GENERATOR.PYTORCH[name]), name


def test_signatures_are_the_functions():
    for name, [cells] in ROWS.items():
        function = getattr(ops, name) if name in ops.__all__ else getattr(nn, name)
        assert cells[0] == f"`{GENERATOR.signature(function)}`", name


def test_torch_names_exist():
    torch = pytest.importorskip("torch")
    named = {n: re.findall(r"torch(?:\.\w+)+", text) for n, text in GENERATOR.PYTORCH.items()}
    missing = []
    for name, paths in named.items():
        if not paths:
            assert text_has_reason(GENERATOR.PYTORCH[name]), name
        for path in paths:
            target = torch
            for part in path.split(".")[1:]:
                target = getattr(target, part, None)
            if target is None:
                missing.append(f"{name}: {path}")
    assert not missing


def text_has_reason(text):
    """An entry naming no torch attribute is NONE followed by why there is none."""
    return text.startswith(GENERATOR.NONE + " (") and text.endswith(")")
