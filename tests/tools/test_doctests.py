"""The examples in the docstrings of the tools run as written."""
import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["tegrad.tools.compile", "tegrad.tools.demo",
                                  "tegrad.tools.explain_op"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
