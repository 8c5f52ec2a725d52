"""The examples in the docstrings of the loop IR, lowering and schedule modules run."""
import doctest
import importlib

import pytest

MODULES = ["tegrad.codegen.loops.nodes", "tegrad.codegen.loops.mapper",
           "tegrad.codegen.loops.printer", "tegrad.codegen.loops.interpret",
           "tegrad.codegen.lower.program", "tegrad.codegen.lower.nest",
           "tegrad.codegen.schedule.loops", "tegrad.codegen.schedule.stages"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
