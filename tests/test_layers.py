"""Every module imports only from its own layer or the layers below it, without cycles.

The layers, lowest first (docs/architecture.md): the solver, the IR, the analyses, the
reference evaluator, autodiff, zero elimination, code generation (its own sub-layers in
the order of its compile pipeline), the pipeline composing
them, the operator library, the neural-network layers, the optimizers, the user tools,
the package itself, and the command-line programs on top of its public API. Every import statement counts, at module level or inside a function: an import
moved into a function to dodge a cycle is still a cycle.
"""
import ast

#: module-name prefixes, lowest layer first; a module belongs to the longest prefix
LAYERS = [
    ["tegrad.solver"],
    ["tegrad.ir"],
    ["tegrad.analysis"],
    ["tegrad.reference"],
    ["tegrad.autodiff"],
    ["tegrad.zero_elim"],
    # code generation, in the order of the compile pipeline: the target (with LLVM's
    # setup, the optimisation pipeline and the JIT), its tuning constants, the on-disk
    # cache of machine code and the loop IR;
    # the kernels that emit products (and the fork-join ABI they call);
    # the native thread pool: run-time code, but linked into this process by the JIT
    # (which a kernel calling it reaches through jit.provide, not an import) and into
    # every exported library, so below export; it implements the kernels' fork-join ABI;
    # lowering to loops and LLVM emission; scheduling;
    # the pipeline of passes; export and the runtime on top of it; the package
    ["tegrad.codegen.target", "tegrad.codegen.tuning", "tegrad.codegen.object_cache",
     "tegrad.codegen.loops"],
    ["tegrad.codegen.kernels"],
    ["tegrad.codegen.runtime.thread_pool"],
    ["tegrad.codegen.lower", "tegrad.codegen.llvm"],
    ["tegrad.codegen.schedule"],
    ["tegrad.codegen.pipeline"],
    ["tegrad.codegen.export"],
    ["tegrad.codegen.runtime"],
    ["tegrad.codegen"],
    ["tegrad.pipeline"],
    ["tegrad.ops"],
    ["tegrad.nn"],
    # optimizers: update rules written with the operators, beside the layers
    ["tegrad.optim"],
    # the whole training step: an optimizer's update compiled with the gradients
    ["tegrad.train"],
    ["tegrad.testing", "tegrad.explain", "tegrad.torch"],
    ["tegrad"],
    # the command-line programs are written against the public API (import tegrad as tg);
    # the package never imports them
    ["tegrad.tools", "tegrad.__main__"],
]


def layer_of(module):
    best, level = -1, None
    for k, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), k
    return level


def _package_of(module, files):
    is_package = files[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def imports_of(module, files):
    """``[(imported module, line)]`` of every tegrad import statement in ``module``."""
    tree = ast.parse(files[module].read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package_of(module, files)
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in files else base, node.lineno))
    return [(m, line) for m, line in out if m == "tegrad" or m.startswith("tegrad.")]


def test_every_module_has_a_layer(tegrad_module_files):
    assert all(layer_of(m) is not None for m in tegrad_module_files)


def test_imports_go_down(tegrad_module, tegrad_module_files):
    own = layer_of(tegrad_module)
    upward = [f"line {line}: {target}"
              for target, line in imports_of(tegrad_module, tegrad_module_files)
              if target in tegrad_module_files and layer_of(target) > own]
    assert not upward, f"{tegrad_module} imports from a higher layer: {upward}"


def test_imports_have_no_cycle(tegrad_module_files):
    files = tegrad_module_files
    graph = {m: sorted({t for t, _ in imports_of(m, files) if t in files and t != m})
             for m in files}
    state, cycle = {}, []

    def visit(m, path):
        state[m] = "open"
        for t in graph[m]:
            if state.get(t) == "open":
                cycle.extend(path[path.index(t):] + [t] if t in path else [m, t])
                return True
            if t not in state and visit(t, path + [t]):
                return True
        state[m] = "done"
        return False

    for m in sorted(graph):
        if m not in state and visit(m, [m]):
            break
    assert not cycle, " -> ".join(cycle)


def test_the_checker_sees_function_level_imports():
    src = "def f():\n    from tegrad.zero_elim.program import eliminate_zeros\n"
    tree = ast.parse(src)
    found = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert found == ["tegrad.zero_elim.program"]
    assert layer_of("tegrad.zero_elim.program") > layer_of("tegrad.autodiff.reverse")
