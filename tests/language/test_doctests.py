"""The examples in the docstrings of the language modules run as written."""
import doctest
import importlib

import pytest

MODULES = ["tegrad", "tegrad.api", "tegrad.dtypes", "tegrad.expr", "tegrad.evaluator",
           "tegrad.graph", "tegrad.intrinsics", "tegrad.mapper", "tegrad.printer",
           "tegrad.reduction", "tegrad.tensor"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
