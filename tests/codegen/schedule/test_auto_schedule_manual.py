"""``tg.build(..., schedule=...)``: an expert's per-stage schedule is applied, results still
equal ``tg.evaluate``, mistakes raise a ``TegradError`` naming the stage, the schedule is
part of the cache key; and ``f.schedule`` shows the choices."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import For
from tegrad.codegen.schedule.describe import describe_schedule, nest_text

F64 = "float64"


def program():
    A = tg.placeholder((6, 20), dtype=F64, name="A")
    k = tg.reduce_axis((0, 20), name="k")
    S = tg.compute((6,), lambda i: tg.sum(A[i, k] * A[i, k], axis=k), name="S")
    B = tg.compute((6, 20), lambda i, j: A[i, j] / (S[i] + 1.0), name="B")
    return A, S, B


def kinds(f):
    return {s.var.name: s.kind for s in walk_stmts(f.kernel.body) if type(s) is For}


def check(f, A, outputs):
    a = np.random.default_rng(0).standard_normal(A.shape)
    for got, want in zip(f(a), tg.evaluate(outputs, {A: a})):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_split_order_unroll_vectorize_parallel_as_asked():
    A, S, B = program()
    f = tg.build([A], [B], threads=2, schedule={"B": {"split": {"j": 8}, "vectorize": "j_i",
                                                     "parallel": "i_1"},
                                               "S": {"unroll": []}})
    check(f, A, [B])
    loops = kinds(f)
    assert loops["j_i"] == "vectorized" and loops["i_1"] == "parallel" and "j_o" in loops
    text = f.schedule
    assert "stage B (as given)" in text and "j_i<8 vectorized" in text and "i_1<6 parallel" in text


def test_order_as_asked():
    A, S, B = program()
    f = tg.build([A], [B], schedule={"B": {"order": ["j", "i_1"]}})
    check(f, A, [B])
    assert "j<20 { i_1<6 }" in f.schedule


def test_compute_at_puts_the_stage_inside_the_loop():
    A, S, B = program()
    f = tg.build([A], [B], schedule={"S": {"compute_at": ("B", "i_1")}})
    check(f, A, [B])
    (top,) = [s for s in walk_stmts(f.kernel.body) if type(s) is For and s.var.name == "i_1"]
    assert any(type(s) is For and s.var.name == "k" for s in walk_stmts(top.body))


def test_none_keeps_a_stage_plain_and_the_others_scheduled():
    A, S, B = program()
    f = tg.build([A], [S, B], schedule={"S": "none"})
    check(f, A, [S, B])
    assert kinds(f)["k"] == "serial"
    assert "stage S (as given)" in f.schedule
    plain = tg.build([A], [S, B], schedule="none")
    assert set(kinds(plain).values()) == {"serial"}
    assert str(plain.schedule).startswith("stage S\n  loops: i<6 { k<20 }")


@pytest.mark.parametrize("request_", ["none", {"split": {"o": 8}}])
def test_a_contraction_scheduled_by_hand_keeps_its_loops(request_):
    """A stage named in ``schedule`` is lowered as its loop nest, not on a product kernel
    (the loops the requests name exist), while the other products still are."""
    from tegrad.codegen.loops.nodes import MatrixProduct
    x = tg.placeholder((64, 48), dtype=F64, name="x")
    w = tg.placeholder((32, 48), dtype=F64, name="w")
    v = tg.placeholder((16, 32), dtype=F64, name="v")
    k = tg.reduce_axis((0, 48), name="k")
    y = tg.compute((64, 32), lambda i, o: tg.sum(x[i, k] * w[o, k], axis=k), name="y")
    z = nn.dense(y, v)
    f = tg.build([x, w, v], [z], schedule={y.name: request_})
    products = [s for s in walk_stmts(f.kernel.body) if type(s) is MatrixProduct]
    assert [p.c.name for p in products] == [z.name]
    assert "gemm" not in str(f.schedule).split(f"stage {z.name}")[0]
    rng = np.random.default_rng(1)
    feeds = {t: rng.standard_normal(t.shape) for t in (x, w, v)}
    np.testing.assert_allclose(f(*feeds.values())[0], tg.evaluate(z, feeds), rtol=1e-12)


@pytest.mark.parametrize("schedule, problem", [
    ({"T": "none"}, "no stage named 'T'"),
    ({"B": {"split": {"q": 4}}}, "stage 'B' has no loop 'q'"),
    ({"B": {"vectorize": "k"}}, "stage 'B' has no loop 'k'"),
    ({"B": {"tile": 4}}, "unknown request"),
    ({"B": {"split": {"j": 0}}}, "factor must be a positive int"),
    ({"S": {"parallel": "k"}}, "parallelize 'k'"),
    ({"B": {"compute_at": ("S", "i")}}, "schedule for stage 'B'"),
    ({"B": 3}, "give 'none' or a dict"),
    ({"B": {"order": ["j", "j"]}}, "schedule for stage 'B'"),
])
def test_mistakes_raise_naming_the_stage(schedule, problem):
    A, S, B = program()
    with pytest.raises(tg.TegradError, match="schedule") as info:
        tg.build([A], [S, B], schedule=schedule)
    assert problem in str(info.value)


def test_schedule_must_be_a_dict():
    A, S, B = program()
    with pytest.raises(tg.TegradError, match="schedule must be"):
        tg.build([A], [B], schedule=["B"])


def test_schedule_is_part_of_the_cache_key():
    A, S, B = program()
    plain = tg.build([A], [B], schedule="none")
    auto = tg.build([A], [B])
    given = tg.build([A], [B], schedule={"B": {"unroll": ["j"]}})
    assert len({id(plain.kernel), id(auto.kernel), id(given.kernel)}) == 3
    assert tg.build([A], [B], schedule={"B": {"unroll": ["j"]}}).kernel is given.kernel


def test_f_schedule_names_fused_stages_vector_axis_and_accumulators():
    x = tg.placeholder((16, 64), name="x")
    y = nn.l2_normalize(x, axis=1)
    f = tg.build([x], [y, tg.differentiate(y, [x])])
    text = str(f.schedule)
    assert "(fused)" in text and "vectorized" in text and "vector accumulators" in text
    assert text.splitlines()[0].startswith("stage")


def test_nodes_the_schedule_does_not_know_are_shown_by_type():
    class MatrixProduct:  # what another pass may put among the kernel's statements
        pass

    A, S, B = program()
    f = tg.build([A], [B])
    kernel = f.kernel
    odd = kernel.__class__(kernel.name, kernel.args, kernel.temps, MatrixProduct())
    assert nest_text(MatrixProduct()) == "MatrixProduct"
    assert "MatrixProduct (not a loop nest)" in describe_schedule(odd)
