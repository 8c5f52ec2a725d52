"""The examples in the docstrings of the language modules run as written."""
import doctest
import importlib

import pytest

MODULES = ["tegrad", "tegrad.ir.builders", "tegrad.ir.dtypes", "tegrad.ir.expr",
           "tegrad.reference.evaluator", "tegrad.ops.validation", "tegrad.analysis.simplify",
           "tegrad.ir.rewrite", "tegrad.analysis.cost", "tegrad.analysis.affine",
           "tegrad.zero_elim.terms", "tegrad.zero_elim.domain", "tegrad.analysis.indices",
           "tegrad.analysis.intervals", "tegrad.zero_elim.hoist", "tegrad.zero_elim.program",
           "tegrad.zero_elim.explain", "tegrad.ir.graph", "tegrad.ir.intrinsics",
           "tegrad.ir.mapper", "tegrad.ir.printer", "tegrad.ir.reduction", "tegrad.ir.tensor",
           "tegrad.reference.memory"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
