"""Every tuning constant of code generation lives in ``codegen/tuning.py``, with its unit.

The module's constants each carry a ``#: unit: ...`` comment and sit under the section of
the stage that reads them; no other module of ``codegen/`` defines one of them again; a
new module-level numeric constant anywhere else in ``codegen/`` is either moved there or
listed below as a semantic or ABI fact, with its reason; ``docs/codegen.md``'s table
shows each constant with its value, unit and stage.
"""
import ast
import pathlib
import re
from types import SimpleNamespace

from hypothesis import given, strategies as st

import tegrad.codegen
from tegrad.codegen import tuning

CODEGEN = pathlib.Path(tegrad.codegen.__file__).parent
TUNING = CODEGEN / "tuning.py"
DOCS = CODEGEN.parent / "docs" / "codegen.md"

#: the units a tuning constant may be given in
UNITS = {
    "bytes", "bytes per character", "columns", "elements", "elements per element",
    "expression nodes", "expression nodes per statement", "flag", "flops",
    "flops per iteration", "iterations", "iterations per thread", "lanes",
    "LLVM instructions", "outputs per call", "points", "programs", "ratio",
    "residue classes", "rows", "spin checks", "statements", "tap loops", "tap tuples",
    "vector steps", "vector steps per accumulator", "vectors", "chunks per thread", "pairs", "orders",
    "seconds", "characters", "parts per core",
}

#: the stages, in pipeline order, whose sections the tuning module has
STAGES = ("lower", "schedule", "kernels", "llvm", "runtime")

#: module-level numeric constants of codegen/ that are facts, not tuning:
#: (file under codegen/, name) -> why it is not a performance choice
SEMANTIC = {
    ("kernels/fork_join.py", "MAX_THREADS"):
        "the claim word of the packing space is one i64: a bit per thread",
    ("runtime/thread_pool.py", "_FUTEX_WAIT_PRIVATE"): "Linux futex operation code",
    ("runtime/thread_pool.py", "_FUTEX_WAKE_PRIVATE"): "Linux futex operation code",
    ("runtime/thread_pool.py", "_SLOT_WORDS"):
        "a worker's slot is one 64-byte cache line, so no two workers share one",
    ("kernels/packspace.py", "LINE"): "the cache line the claim word and slots align to",
    ("llvm/kernel_buffers.py", "STORAGE_ALIGNMENT"):
        "the alignment declared to LLVM: the runtime's storage must have it",
    ("llvm/names.py", "NAME_LIMIT"): "the length of generated LLVM names, for readability",
    ("llvm/parallel.py", "NO_FAILURE"): "the status word's value when no iteration failed",
    ("llvm/trig.py", "CODY_WAITE_LIMIT"): "the range where the float32 reduction is exact",
    ("llvm/trig.py", "_TWO_OVER_PI"): "a mathematical constant",
    ("llvm/trig.py", "_PI_2_POW_M63"): "a mathematical constant",
    ("llvm/intrinsics.py", "_LN2"): "a mathematical constant",
    ("llvm/intrinsics.py", "_LOG2E"): "a mathematical constant",
    ("llvm/intrinsics.py", "_LN2_HIGH"): "a mathematical constant (ln 2's high bits)",
    ("llvm/intrinsics.py", "_LN2_LOW"): "a mathematical constant (ln 2's low bits)",
    ("export/abi.py", "WORKSPACE_ALIGNMENT"): "the C ABI's promise to the caller",
    ("export/abi.py", "IDENT_LIMIT"): "C's 63 significant characters of an identifier",
    ("runtime/program_key.py", "_RECURSION_DEPTH"):
        "the depth of recursion that stays within Python's stack",
}

_NUMBER = r"0[xX][0-9a-fA-F_]+|\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|True|False"
#: a module-level ``NAME = <numeric expression>`` (an annotation allowed), comment aside
_CONSTANT = re.compile(r"^(_?[A-Z][A-Z0-9_]*)\s*(?::[^=]+)?=([^#]+)(?:#.*)?$")


def numeric_constant(line):
    """The name a module-level line assigns a numeric expression to, or None."""
    m = _CONSTANT.match(line)
    if m is None:
        return None
    rest = re.sub(_NUMBER, "0", m.group(2))
    return m.group(1) if "0" in rest and re.fullmatch(r"[\s0()+\-*/%<>~]+", rest) else None


def _assigned(tree):
    """``{name: node}`` of the module-level assignments of ``tree``."""
    out = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out[n.id] = node
    return out


def _constants():
    """``{name: (unit, stage, value text)}`` of the tuning module, from its source."""
    lines = TUNING.read_text().split("\n")
    stage, out = None, {}
    for k, line in enumerate(lines):
        section = re.fullmatch(r"# -+ (\w+) -+", line)
        if section:
            stage = section.group(1)
        m = re.match(r"^([A-Z][A-Z0-9_]*) = (.+)$", line)
        if m:
            j = k
            while j > 0 and lines[j - 1].startswith("#:"):
                j -= 1
            unit = re.fullmatch(r"#: unit: (.+)", lines[j]) if j < k else None
            out[m.group(1)] = (unit and unit.group(1), stage, m.group(2), k - j)
    return out


def test_the_regex_finds_numeric_constants():
    assert numeric_constant("PART_SIZE = 2000") == "PART_SIZE"
    assert numeric_constant("_X: int = (1 << 64) - 1  # all ones") == "_X"
    assert numeric_constant("LIMIT = 4.194304e6") == "LIMIT"
    assert numeric_constant("WIDE = True") == "WIDE"
    assert numeric_constant("MASK = 0xFF_FF") == "MASK"
    assert numeric_constant("NAMES = ('a', 'b')") is None
    assert numeric_constant("N = resolve(4)") is None
    assert numeric_constant("    INDENTED = 4") is None


def test_every_constant_has_its_unit_and_reason():
    found = _constants()
    names = {n for n in vars(tuning) if re.fullmatch(r"[A-Z][A-Z0-9_]*", n)}
    assert names == set(found), "a constant defined other than as `NAME = value`"
    for name, (unit, stage, _, comment_lines) in found.items():
        assert unit in UNITS, f"{name}: its comment must start `#: unit: <one of UNITS>`"
        assert comment_lines >= 2, f"{name}: its comment must say why it has its value"
        assert stage in STAGES, f"{name} stands under no stage's section"
        assert isinstance(getattr(tuning, name), (int, float)), name


def test_every_function_is_of_the_target_and_gives_its_unit():
    source = TUNING.read_text()
    assert "Target.host" not in source, "tuning is read from the Target given, not the host"
    functions = [f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)]
    assert functions
    for f in functions:
        assert f.args.args[0].arg == "target", f.name
        assert "unit:" in ast.get_docstring(f), f.name


def test_no_other_module_defines_a_tuning_constant():
    names = set(_constants())
    twice = [f"{path.relative_to(CODEGEN)}: {sorted(both)}"
             for path in sorted(CODEGEN.rglob("*.py")) if path != TUNING
             for both in [names & set(_assigned(ast.parse(path.read_text())))] if both]
    assert not twice, f"tuning constants defined again: {twice}"


def test_no_numeric_constant_outside_tuning_but_semantic_facts():
    found = {(str(path.relative_to(CODEGEN)), name)
             for path in sorted(CODEGEN.rglob("*.py")) if path != TUNING
             for line in path.read_text().split("\n")
             for name in [numeric_constant(line)] if name}
    new = sorted(found - set(SEMANTIC))
    assert not new, (f"numeric constants outside codegen/tuning.py: {new}; move a "
                     "performance choice there, or list a fact in SEMANTIC with its reason")
    assert not set(SEMANTIC) - found, f"stale entries: {sorted(set(SEMANTIC) - found)}"
    assert all(reason and "\n" not in reason for reason in SEMANTIC.values())


def test_the_docs_table_shows_every_constant():
    text = DOCS.read_text()
    section = text[text.index("## Tuning constants"):]
    end = section.find("\n## ")
    section = section if end < 0 else section[:end]
    rows = {m.group(1): [c.strip() for c in m.group(2).split(" | ")]
            for m in re.finditer(r"^\| `([A-Z][A-Z0-9_]*)` \| (.+) \|$", section, re.MULTILINE)}
    found = _constants()
    assert set(rows) == set(found)
    for name, (unit, stage, value, _) in found.items():
        shown, shown_unit, shown_stage = rows[name][:3]
        assert (shown, shown_unit, shown_stage) == (f"`{value}`", unit, stage), name


@given(lanes=st.sampled_from([1, 2, 4, 8, 16]), registers=st.integers(4, 64),
       dtype=st.sampled_from(["float32", "float64"]))
def test_the_gemm_register_block_fits_the_targets_registers(lanes, registers, dtype):
    target = SimpleNamespace(lanes=lambda d: lanes * (2 if d == "float32" else 1),
                             vector_registers=registers)
    vl, mr, nr = tuning.gemm_register_block(target, dtype)
    cols = tuning.GEMM_COLUMN_VECTORS
    assert vl == target.lanes(dtype) and nr == cols * vl
    assert 1 <= mr <= tuning.GEMM_MAX_ROWS
    # accumulators, a row's vectors of B and the broadcast of A fit in the registers, and
    # one more row would not (unless the cap stops it)
    assert mr == 1 or mr * cols + cols + 1 <= registers
    assert mr == tuning.GEMM_MAX_ROWS or (mr + 1) * cols + cols + 1 > registers
