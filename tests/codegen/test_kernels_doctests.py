"""The examples in the docstrings of codegen.kernels run as written."""
import doctest
import importlib

import pytest

MODULES = ["tegrad.codegen.kernels", "tegrad.codegen.kernels.jit", "tegrad.codegen.kernels.irutil",
           "tegrad.codegen.kernels.threadpool", "tegrad.codegen.kernels.gemm",
           "tegrad.codegen.kernels.dot", "tegrad.codegen.kernels.product",
           "tegrad.codegen.kernels.contraction"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
