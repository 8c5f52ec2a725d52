"""The examples in the docstrings of every module of the package run as written.

The modules are discovered (``tests/conftest.py``), so a new module's examples run
without being listed anywhere.
"""
import doctest
import importlib


#: modules whose docstrings must show their contract by example (at least one runs)
WITH_EXAMPLES = {
    "tegrad.codegen.kernels", "tegrad.codegen.target.jit", "tegrad.codegen.kernels.irutil",
    "tegrad.codegen.runtime.thread_pool", "tegrad.codegen.kernels.fork_join",
    "tegrad.codegen.kernels.gemm",
    "tegrad.codegen.kernels.gemm_spec", "tegrad.codegen.kernels.gemm_emitter",
    "tegrad.codegen.kernels.gemm_micro", "tegrad.codegen.kernels.gemm_pack",
    "tegrad.codegen.kernels.gemm_driver",
    "tegrad.codegen.kernels.dot", "tegrad.codegen.kernels.product",
    "tegrad.codegen.lower.product_plans", "tegrad.codegen.lower.contraction_operands",
    "tegrad.codegen.lower.reduction_bounds", "tegrad.codegen.lower.index_forms",
    "tegrad.codegen.lower.invariant_axes", "tegrad.codegen.lower.divided_axes",
    "tegrad.codegen.lower.gemm_plans", "tegrad.codegen.llvm.emitter",
    "tegrad.codegen.llvm.expressions", "tegrad.codegen.llvm.statements",
    "tegrad.codegen.llvm.kernel_buffers", "tegrad.codegen.llvm.python_entry",
    "tegrad.codegen.loops.nodes",
    "tegrad.codegen.loops.mapper", "tegrad.codegen.loops.printer",
    "tegrad.codegen.loops.interpret", "tegrad.codegen.loops.errors",
    "tegrad.codegen.lower.program", "tegrad.codegen.lower.nest",
    "tegrad.codegen.schedule.loops", "tegrad.codegen.schedule.stages",
    "tegrad.codegen.pipeline", "tegrad.codegen.target", "tegrad.train",
    "tegrad.codegen.lower.contraction",
    "tegrad.codegen.llvm.types", "tegrad.codegen.llvm.conversions",
    "tegrad.codegen.llvm.arithmetic", "tegrad.codegen.llvm.intrinsics",
    "tegrad.codegen.llvm.emit", "tegrad.codegen.target.machine",
    "tegrad.codegen.target.llvm_setup", "tegrad.codegen.target.optimise",
    "tegrad.codegen.runtime.arguments", "tegrad.codegen.runtime.executable",
    "tegrad.codegen.runtime.program_key", "tegrad.codegen.runtime.builder",
    "tegrad.codegen.export.abi", "tegrad.codegen.export.header",
    "tegrad.codegen.export.interface", "tegrad.codegen.export.library",
    "tegrad.codegen.export.link", "tegrad.codegen.export.program",
    "tegrad.codegen.export.targets",
    "tegrad.tools.compile", "tegrad.tools.demo", "tegrad.tools.explain_op",
}


def test_docstring_examples(tegrad_module):
    module = importlib.import_module(tegrad_module)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0 or tegrad_module not in WITH_EXAMPLES, \
        f"{tegrad_module} has lost its docstring examples"


def test_every_module_is_found(tegrad_module_files):
    assert WITH_EXAMPLES <= set(tegrad_module_files)
    for name in ("tegrad.pipeline", "tegrad.nn.conv", "tegrad.solver.domain",
                 "tegrad.codegen.loops.nodes", "tegrad.autodiff.rules", "tegrad.testing"):
        assert name in tegrad_module_files
