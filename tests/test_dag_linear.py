"""Expressions that reuse their sub-expressions are DAGs whose trees are exponentially
larger: costing, printing and simplifying them takes time linear in the depth of the
reuse (lowering to loops still expands the tree).

``chain(d)`` is ``e -> e * 0.5 + e * 0.25`` applied ``d`` times to ``x[i]``: 3d + 3
distinct nodes, a tree of about 2^(d+2). On the code these tests were written against,
depth 14 took 4 s to cost; here depth 40 has a budget of seconds, so a pass that walks
the tree again fails by hours, not by a margin.
"""


import numpy as np

import tegrad as tg
from tegrad.ir.mapper import walk

N = 8


def chain(depth, name="y"):
    x = tg.placeholder((N,), dtype="float64", name="x")

    def body(i):
        e = x[i]
        for _ in range(depth):
            e = e * 0.5 + e * 0.25
        return e
    return x, tg.compute((N,), body, name=name)


def guarded_chain(depth):
    """A reduction reused through ``depth`` levels of selects, each level building its
    condition again (structurally the same one, a new node)."""
    x = tg.placeholder((N,), dtype="float64", name="x")
    k = tg.reduce_axis((0, N), name="k")

    def body(i):
        e = tg.sum(x[k] * x[i], axis=k)
        for _ in range(depth):
            e = e * 0.5 + tg.if_then_else(x[i] > 0, e * 0.25, e * 0.125)
        return e
    return x, tg.compute((N,), body, name="y")


def test_cost_counts_every_path_in_time_of_the_distinct_nodes():
    # the counts are those of the tree (a node once per path reaching it): 3 (2^d - 1)
    # float operations per point, and the reduction's 3^d paths of points
    depth = 40
    x, y = chain(depth)
    c = tg.cost(y)
    assert (c.iterations, c.flops) == (N, N * 3 * (2 ** depth - 1))
    x, y = guarded_chain(30)
    c = tg.cost(y)
    assert c.iterations == N + 3 ** 30 * N * N


def test_printing_names_shared_sub_expressions():
    # written out, the text would hold 2^40 reads; with the shared parts named it
    # holds each once
    x, y = chain(40)
    text = str(y)
    assert len(text) < 100 * 40
    assert text.count("x[i]") == 1 and "$40 * 0.5 + $40 * 0.25" in text
    # a small expression prints as before, whatever it shares
    x, y = chain(3)
    assert "$" not in str(y)


def test_simplifying_a_chain_of_rewrites_walks_it_once():
    # each level rewrites (* 1.0, + 0.0) and its result is simplified again: remembered
    # results keep that to the new nodes; counted through the rule calls
    from tegrad.analysis import simplify as simplify_module
    x = tg.placeholder((N,), dtype="float64", name="x")
    i = tg.Var("i")

    def rewrites(depth):
        e = x[i]
        for _ in range(depth):
            e = (e * 0.5 + e * 0.25) * 1.0 + 0.0
        calls = [0]
        original = simplify_module._rewritten

        def counted(node, rules):
            calls[0] += 1
            return original(node, rules)
        simplify_module._rewritten = counted
        try:
            out = simplify_module.simplify(e)
        finally:
            simplify_module._rewritten = original
        assert sum(1 for _ in walk(out)) < 6 * depth + 10
        return calls[0]
    assert rewrites(200) < 3 * rewrites(100)


def _chain_gradient(depth):
    x = tg.placeholder((4,), dtype="float64", name="x")

    def body(i):
        e = x[i]
        for _ in range(depth):
            e = e * 0.5 + tg.sin(e) * 0.25
        return e
    y = tg.compute((4,), body, name="y")
    (dx,) = tg.differentiate(y, [x])
    return x, y, dx


def test_a_gradient_of_shared_subexpressions_lowers_each_node_once_per_guard():
    """``e = e*0.5 + sin(e)*0.25``, 12 deep, with its gradient: lowering remembers each
    node per renames and guard, so the kernel's loads of x grow linearly with the depth
    (the gradient's own copies of nodes); expanded as a tree it held thousands, and the
    build took 98 s."""
    from tegrad.codegen.lower.program import lower_program
    from tegrad.codegen.loops.mapper import walk_stmts, stmt_exprs
    from tegrad.codegen.loops.nodes import Load
    depth = 12
    x, y, dx = _chain_gradient(depth)
    kernel = lower_program([x], [y, dx])
    objects = {}  # id -> node, every expression object reachable from the statements
    stack = [e for s in walk_stmts(kernel.body) for e in stmt_exprs(s)]
    while stack:
        n = stack.pop()
        if id(n) in objects:
            continue
        objects[id(n)] = n
        stack.extend(c for c in n.children_values() if hasattr(c, "children_values"))
        stack.extend(c for v in n.children_values() if type(v) is tuple
                     for c in v if hasattr(c, "children_values"))
    x_loads = [n for n in objects.values() if type(n) is Load and n.buffer.name == "x"]
    assert len(x_loads) <= 4 * depth, len(x_loads)  # linear in the depth
    v = np.random.default_rng(0).standard_normal(4)
    got = tg.build([x], [y, dx])(v)
    for g, w in zip(got, tg.evaluate([y, dx], {x: v})):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def _program_nodes(t):
    """Distinct expression objects in the bodies of the stages behind ``t``."""
    seen, stages, stack = set(), {}, [t]
    while stack:
        s = stack.pop()
        if id(s) in stages:
            continue
        stages[id(s)] = s
        stack.extend(s.inputs)
    for s in stages.values():
        body = getattr(s.op, "body", None)
        if body is not None:
            seen |= {id(n) for n in walk(body)}
    return len(seen)


def test_differentiating_a_chain_of_shared_subexpressions_is_not_exponential():
    """``e = e*0.5 + sin(e)*0.25``: the gradient of a chain of links has 2**depth terms
    when expanded; normalisation and zero elimination remember each shared node, and a
    sum stays one term past MAX_SUM_TERMS, so the gradient grows linearly with the
    depth (depth 14 took 5 s and doubled with each link). It stays exact."""
    small, large = _chain_gradient(20), _chain_gradient(40)
    assert _program_nodes(large[2]) <= 3 * _program_nodes(small[2])
    x, y, dx = large
    v = np.random.default_rng(1).uniform(-1, 1, 4)
    (g,) = tg.evaluate([dx], {x: v})
    h = 1e-6
    for k in range(4):
        e = np.zeros(4)
        e[k] = h
        fd = (tg.evaluate(y, {x: v + e}) - tg.evaluate(y, {x: v - e}))[k] / (2 * h)
        np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-8)
    got = tg.build([x], [dx])(v)[0]
    np.testing.assert_allclose(got, g, rtol=1e-12)
