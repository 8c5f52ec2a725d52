"""The examples in the docstrings of every module of the package run as written.

The modules are discovered (``tests/conftest.py``), so a new module's examples run
without being listed anywhere.
"""
import doctest
import importlib


def test_docstring_examples(tegrad_module):
    module = importlib.import_module(tegrad_module)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_every_module_is_found(tegrad_module_files):
    for name in ("tegrad.pipeline", "tegrad.nn.conv", "tegrad.solver.domain",
                 "tegrad.codegen.loops.nodes", "tegrad.autodiff.rules", "tegrad.testing"):
        assert name in tegrad_module_files
