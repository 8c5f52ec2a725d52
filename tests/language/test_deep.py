"""Expressions 10,000 operations deep go through the iterative passes without recursion."""
import sys

import pytest

import tegrad as tg
from tegrad.ir.expr import Binary, structural_equal
from tegrad.ir.mapper import CombineMapper, children, tensors_read, walk

DEPTH = 10_000


def chain(x):
    e = x[0]
    for _ in range(DEPTH):
        e = e * 1.0001 + 0.5
    return e


@pytest.fixture(scope="module")
def deep():
    x = tg.placeholder((2,), dtype="float64", name="x")
    return x, chain(x), chain(x)


@pytest.fixture(autouse=True)
def low_recursion_limit():
    # far below the depth: any recursive pass would fail
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(500)
    yield
    sys.setrecursionlimit(old)


def test_hash_and_structural_equality(deep):
    _, a, b = deep
    assert hash(a) == hash(b)
    assert structural_equal(a, b)
    assert {a: 1}[b] == 1
    assert not structural_equal(a, Binary("add", a.a, tg.const(0.25, "float64"), a.dtype))


def test_printing(deep):
    _, a, _ = deep
    text = str(a)
    assert text.count("1.0001") == DEPTH and text.endswith("+ 0.5")


def test_walk_children_and_reads(deep):
    x, a, _ = deep
    assert sum(1 for _ in walk(a)) == 4 * DEPTH + 2
    assert len(children(a)) == 2
    assert tensors_read(a) == [x]


def test_a_combine_mapper_counts_operations(deep):
    class Count(CombineMapper):
        def map_const(self, e):
            return 0

        map_var = map_const

        def map_binary(self, e, a, b):
            return a + b + 1

        def map_read(self, e, *indices):
            return sum(indices)

    _, a, _ = deep
    assert Count()(a) == 2 * DEPTH


def test_a_deep_stage_is_built_and_costed(deep):
    x, _, _ = deep

    def body(i):
        e = x[i]
        for _ in range(DEPTH):
            e = e * 1.0001 + 0.5
        return e

    y = tg.compute((2,), body, name="y")
    assert tg.cost(y).flops == 2 * 2 * DEPTH
    assert tg.format(y).count("1.0001") == DEPTH


def test_identity_mappers_substitution_and_simplification(deep):
    from tegrad.analysis.simplify import simplify
    from tegrad.ir.expr import Var
    from tegrad.ir.mapper import IdentityMapper, substitute

    x, a, _ = deep
    assert IdentityMapper()(a) is a
    assert simplify(a) is a
    i = Var("i")
    e = x[i]
    for _ in range(DEPTH):
        e = e * 1.0 + 0.0
    assert str(simplify(e)) == "x[i]"
    moved = substitute(a * x[i], {"i": Var("j")})
    assert str(moved).endswith("x[j]")
