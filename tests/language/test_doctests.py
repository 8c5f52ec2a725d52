"""The examples in the docstrings of the language modules run as written."""
import doctest
import importlib

import pytest

MODULES = ["tegrad", "tegrad.api", "tegrad.dtypes", "tegrad.expr", "tegrad.evaluator",
           "tegrad.validation", "tegrad.simplify", "tegrad.rewrite", "tegrad.cost",
           "tegrad.zero_elim.affine", "tegrad.zero_elim.terms", "tegrad.zero_elim.domain",
           "tegrad.zero_elim.indices", "tegrad.zero_elim.intervals", "tegrad.zero_elim.hoist",
           "tegrad.zero_elim.program", "tegrad.zero_elim.explain",
           "tegrad.graph", "tegrad.intrinsics", "tegrad.mapper", "tegrad.printer",
           "tegrad.reduction", "tegrad.tensor"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
