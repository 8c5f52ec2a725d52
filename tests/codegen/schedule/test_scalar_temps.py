"""A temporary read only in the iteration that writes it is held in a variable: no buffer,
the same bits."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Let, Load, Store
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.fusion import fuse_stages
from tegrad.codegen.schedule.scalar_temps import scalar_temps

from support.compiled_programs import programs, with_gradient


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(large=False), st.integers(0, 2**31 - 1))
def test_random_fused_kernels_give_the_same_bits(program, seed):
    inputs, outputs, feed = with_gradient(program, seed)
    kernel = fuse_stages(lower_program(inputs, outputs))[0]
    new = scalar_temps(kernel)
    args = [feed[t] for t in inputs]
    want, _ = run(kernel, args)
    got, _ = run(new, args)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()
    gone = {b.name for b in kernel.temps} - {b.name for b in new.temps}
    for node in walk_stmts(new.body):
        assert not (type(node) is Store and node.buffer.name in gone)


def _chain(n, m, dtype):
    """A gradient whose fused loop writes ``dr`` (the relu's adjoint) and reads it back
    twice in the same iteration, and nowhere else (``w`` elementwise: a weight shared by
    the rows has its gradient summed in a loop of its own, after its zero fill)."""
    x = tg.placeholder((n, m), dtype=dtype, name="x")
    w = tg.placeholder((n, m), dtype=dtype, name="w")
    head = tg.placeholder((n, m), dtype=dtype, name="head")
    r = tg.compute((n, m), lambda i, j: tg.max(x[i, j] * w[i, j], 0.0), name="r")
    s = tg.compute((n, m), lambda i, j: tg.tanh(r[i, j]) * r[i, j], name="s")
    loss = tg.compute((n, m), lambda i, j: s[i, j] * head[i, j], name="loss")
    return [x, w, head], [loss, *tg.differentiate(tg.ops.sum(loss), [x, w])]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 40), m=st.integers(2, 70), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_a_built_step_holds_its_fused_intermediates_in_variables(n, m, dtype, threads, seed):
    inputs, outputs = _chain(n, m, dtype)
    f = tg.build(inputs, outputs, threads=threads)
    plain = tg.build(inputs, outputs, threads=threads, schedule="none")
    held = {s.stage for s in walk_stmts(f.kernel.body) if type(s) is Let and s.stage}
    assert held, str(f.loops)
    temps = {b.name for b in f.kernel.temps}
    assert not held & temps
    for stage in held:  # still named where it is computed, no load of its buffer left
        assert stage in str(f.schedule)
        assert not any(type(e) is Load and e.buffer.name == stage
                       for e in _loads(f.kernel.body))
    rng = np.random.default_rng(seed)
    feed = [rng.standard_normal(p.shape).astype(dtype) for p in inputs]
    want = tg.evaluate(outputs, dict(zip(inputs, feed)))
    tol = 1e-5 if dtype == "float32" else 1e-12
    for g, p, w in zip(f(*feed), plain(*feed), want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
        np.testing.assert_allclose(g, p, rtol=tol, atol=tol * max(1.0, np.abs(w).max()))


def _loads(body):
    from tegrad.codegen.loops.mapper import loads, stmt_exprs
    return [ld for s in walk_stmts(body) for e in stmt_exprs(s) for ld in loads(e)]


def test_a_temporary_read_elsewhere_or_at_another_element_keeps_its_buffer():
    x = tg.placeholder((8,), dtype="float64", name="x")
    t = tg.compute((8,), lambda i: tg.exp(x[i]), name="t")
    shifted = tg.compute((8,), lambda i: t[i] * t[(i + 1) % 8], name="shifted")
    kernel = fuse_stages(lower_program([x], [shifted]))[0]
    assert "t" in {b.name for b in scalar_temps(kernel).temps}
    k = tg.reduce_axis((0, 8), name="k")
    total = tg.compute((8,), lambda i: tg.sum(t[k], axis=k) + t[i] * t[i], name="total")
    kernel = fuse_stages(lower_program([x], [total]))[0]
    assert "t" in {b.name for b in scalar_temps(kernel).temps}
