"""Every module imports only from its own layer or the layers below it, without cycles.

The layers, lowest first (docs/architecture.md): the solver, the IR, the analyses, the
reference evaluator, autodiff, zero elimination, code generation, the pipeline composing
them, the operator library, the neural-network layers, the user tools, and the package
itself. Every import statement counts, at module level or inside a function: an import
moved into a function to dodge a cycle is still a cycle.
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: folders at the top of the repository and the import names they install as
TOP_LEVEL = {"tegrad": "tegrad", "solver": "tegrad.solver", "codegen": "tegrad.codegen"}

#: module-name prefixes, lowest layer first; a module belongs to the longest prefix
LAYERS = [
    ["tegrad.solver"],
    ["tegrad.ir"],
    ["tegrad.analysis"],
    ["tegrad.reference"],
    ["tegrad.autodiff"],
    ["tegrad.zero_elim"],
    ["tegrad.codegen"],
    ["tegrad.pipeline"],
    ["tegrad.ops"],
    ["tegrad.nn"],
    ["tegrad.testing", "tegrad.explain", "tegrad.tools", "tegrad.__main__"],
    ["tegrad"],
]


def module_files():
    out = {}
    for folder, name in TOP_LEVEL.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join((name,) + rel)] = path
    return out


MODULES = module_files()


def layer_of(module):
    best, level = -1, None
    for k, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), k
    return level


def _package_of(module):
    is_package = MODULES[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def imports_of(module):
    """``[(imported module, line)]`` of every tegrad import statement in ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package_of(module)
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in MODULES else base, node.lineno))
    return [(m, line) for m, line in out if m == "tegrad" or m.startswith("tegrad.")]


def test_every_module_has_a_layer():
    assert all(layer_of(m) is not None for m in MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down(module):
    own = layer_of(module)
    upward = [f"line {line}: {target}" for target, line in imports_of(module)
              if target in MODULES and layer_of(target) > own]
    assert not upward, f"{module} imports from a higher layer: {upward}"


def test_imports_have_no_cycle():
    graph = {m: sorted({t for t, _ in imports_of(m) if t in MODULES and t != m})
             for m in MODULES}
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
