"""Loops from isl's AST builder visit exactly the points of their domains; the disjoint
form visits each point of a union once, running the statements whose domains hold it."""
import itertools
import random

import pytest

from tegrad.solver.affine import Affine
from tegrad.solver import loop_ast
from tegrad.solver.constraint import eq, ge, gt, le, lt
from tegrad.solver.loop_ast import Guard, Loop, Point, Seq, build_disjoint_loops, build_loops


def _eval(e, env):
    op = e[0]
    if op == "int":
        return e[1]
    if op == "var":
        return env[e[1]]
    args = [_eval(a, env) for a in e[1:]]
    fold = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": min, "max": max,
            "and": lambda a, b: a and b, "or": lambda a, b: a or b}
    if op == "neg":
        return -args[0]
    if op in fold:
        out = args[0]
        for a in args[1:]:
            out = fold[op](out, a)
        return out
    if op == "select":
        return args[1] if args[0] else args[2]
    compare = {"eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "lt": lambda a, b: a < b,
               "ge": lambda a, b: a >= b, "gt": lambda a, b: a > b}
    return compare[op](*args)


def visits(node, variables, env):
    """``[(statement, point)]`` in the order the tree runs them."""
    if isinstance(node, Loop):
        out = []
        for v in range(_eval(node.lower, env), _eval(node.upper, env), node.step):
            out += visits(node.body, variables, {**env, node.var: v})
        return out
    if isinstance(node, Guard):
        if _eval(node.cond, env):
            return visits(node.then, variables, env)
        return [] if node.otherwise is None else visits(node.otherwise, variables, env)
    if isinstance(node, Seq):
        return [p for c in node.items for p in visits(c, variables, env)]
    assert isinstance(node, Point)
    return [(node.statement, tuple(_eval(v, env) for v in node.values))]


i, k = Affine.var("i"), Affine.var("k")
BOX = [ge(i, 0), lt(i, 6), ge(k, 0), lt(k, 6)]
CASES = {
    "overlapping ranges": [[lt(k, 4)], [ge(k, 2)]],
    "triangles": [[lt(k, i)], [ge(k, i)], [ge(k, 3)]],
    "parities": [[eq(k % 2, 0)], [eq((k + i) % 3, 0)], []],
    "a point and a line": [[eq(i, 0), eq(k, 2)], [eq(k, 2), lt(i, 2)]],
    "equal domains": [[lt(k, i)], [lt(k, i)]],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_disjoint_loops_visit_each_point_of_the_union_once(name):
    statements = [BOX + extra for extra in CASES[name]]
    tree, pieces = build_disjoint_loops(["i", "k"], [], statements)
    seen = visits(tree, ["i", "k"], {})
    points = [p for _, p in seen]
    assert len(points) == len(set(points))  # each point once
    for (piece, p) in seen:
        holds = tuple(s for s, cons in enumerate(statements)
                      if all(c.evaluate({"i": p[0], "k": p[1]}) for c in cons))
        assert pieces[piece] == holds
    union = {p for p in itertools.product(range(6), range(6))
             if any(all(c.evaluate({"i": p[0], "k": p[1]}) for c in cons) for cons in statements)}
    assert set(points) == union


def test_a_variable_fixed_by_the_context_is_a_point_not_a_loop():
    # k <= n with 0 <= n < 1 known: k has the single value 0
    n = Affine.var("n")
    tree = build_loops(["k"], ["n"], [[ge(k, 0), lt(k, 2), ge(n, k)]], [ge(n, 0), lt(n, 1)])
    assert isinstance(tree, Point)
    assert visits(tree, ["k"], {"n": 0}) == [(0, (0,))]


def test_loops_isl_builds_wrongly_are_refused():
    # isl's AST builder (islpy 2026.2) gives loops that miss most points of this domain:
    # one t with 20 t in a window moving with the parameters; a tree is only returned
    # when it visits exactly the domain's points
    i0, i1, t = Affine.var("i0"), Affine.var("i1"), Affine.var("t")
    a = -8 * i - 35 * i0 + 28 * i1 + 6
    lo = a // 20 + 4
    domain = [ge(i, 0), lt(i, 2), ge(t, lo), lt(t, lo + ((a + 4) // 20 - a // 20))]
    context = [ge(i0, 0), lt(i0, 4), ge(i1, 0), lt(i1, 5)]
    try:
        tree = build_loops(["i", "t"], ["i0", "i1"], [domain], context)
    except ValueError:
        return
    for p0 in range(4):
        for p1 in range(5):
            env = {"i0": p0, "i1": p1}
            want = [(0, (vi, vt)) for vi in range(2) for vt in range(-40, 40)
                    if all(c.evaluate({**env, "i": vi, "t": vt}) for c in domain)]
            assert sorted(visits(tree, ["i", "t"], env)) == want


def test_a_box_gets_the_loops_isl_builds_without_isl():
    """Constant bounds of single variables (the most common domain) skip isl: the tree
    is the one isl builds, over random boxes, empty and one-point ranges included, with
    redundant bounds and their order drawn too."""
    rng = random.Random(20261127)
    for _ in range(400):
        names = [f"v{n}" for n in range(rng.randint(1, 4))]
        cons = []
        for name in names:
            v = Affine.var(name)
            for _ in range(rng.randint(1, 2)):
                lo = rng.randint(-3, 3)
                cons.append(ge(v, lo) if rng.random() < 0.5 else gt(v, lo - 1))
            for _ in range(rng.randint(1, 2)):
                hi = rng.randint(-2, 6)
                cons.append(lt(v, hi) if rng.random() < 0.5 else le(v, hi - 1))
        rng.shuffle(cons)
        assert loop_ast._constant_box(names, cons) is not None
        by_isl = loop_ast._loops(names, [], [loop_ast._basic_set(names, [], cons)], [])
        assert build_loops(names, [], [cons]) == by_isl


def test_bounds_that_are_not_a_constant_box_go_to_isl():
    assert loop_ast._constant_box(["i", "k"], [ge(i, 0), lt(i, 4), ge(k, 0), lt(k, i)]) is None
    assert loop_ast._constant_box(["i"], [ge(i, 0)]) is None  # unbounded above
    assert loop_ast._constant_box(["i"], [ge(2 * i, 0), lt(i, 3)]) is None
    assert loop_ast._constant_box(["i"], [eq(i, 2)]) is None
    tree = build_loops(["i", "k"], [], [[ge(i, 0), lt(i, 4), ge(k, 0), lt(k, i)]])
    assert sorted(p for _, p in visits(tree, ["i", "k"], {})) == \
        [(a, b) for a in range(4) for b in range(a)]
