"""Stages are immutable and built through one checked constructor per kind."""
import pytest

import tegrad as tg
from tegrad.ir.expr import Var
from tegrad.ir.stages import StageMapper, is_placeholder, stage_exprs
from tegrad.ir.tensor import ScatterTarget, compute_stage, scan_stage, scatter_stage


@pytest.fixture
def program():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: x[i] * 2.0, name="y")
    s = tg.scatter_add((3,), (3,), lambda i: (2 - i,), lambda i: x[i], name="s")
    return x, y, s


@pytest.fixture
def scanned(program):
    x = program[0]
    return tg.scan((3,), lambda a: x[a] * 2.0, tg.sum, name="P")


def test_stage_ops_are_frozen(program):
    x, y, s = program
    with pytest.raises(AttributeError, match="immutable"):
        y.op.body = y.op.body * 3.0
    with pytest.raises(AttributeError, match="immutable"):
        x.op.shape = (4,)
    with pytest.raises(AttributeError, match="immutable"):
        s.op.targets[0].value = x[0]
    with pytest.raises(AttributeError, match="immutable"):
        del s.op.init


def test_scan_ops_are_frozen(scanned):
    with pytest.raises(tg.ImmutableError, match="'P'.*immutable"):
        scanned.op.reverse = True


def test_compute_stage_checks_like_compute(program):
    x, y, _ = program
    again = compute_stage("y2", y.op.axes, y.op.body + 1.0)
    assert again.shape == (3,) and again.dtype == "float64"
    with pytest.raises(tg.ScopeError, match="'bad'.*'j'"):
        compute_stage("bad", y.op.axes, x[Var("j")])
    k = tg.reduce_axis((0, 3), name="k")
    with pytest.raises(tg.ShapeError, match="'bad'"):
        compute_stage("bad", [k], x[k])


def test_scatter_stage_checks_like_scatter_add(program):
    x, _, s = program
    i = s.op.axes[0].var
    with pytest.raises(tg.IndexingError, match="'bad'"):
        scatter_stage("bad", (3,), s.op.axes, [ScatterTarget((i, i), x[i])])
    with pytest.raises(tg.ScopeError, match="'bad'"):
        scatter_stage("bad", (3,), s.op.axes, [ScatterTarget((Var("q"),), x[i])])
    with pytest.raises(tg.DTypeError, match="'bad'"):
        scatter_stage("bad", (3,), s.op.axes, [ScatterTarget((i,), x[i]),
                                               ScatterTarget((i,), tg.cast(i, "float32"))])


def test_scan_stage_checks_like_scan(program, scanned):
    x = program[0]
    again = scan_stage("P2", scanned.op.axes, 0, tg.prod, scanned.op.source, reverse=True)
    assert again.shape == (3,) and again.op.reverse and again.op.reducer is tg.prod
    a = scanned.op.axes[0].var
    with pytest.raises(tg.ScopeError, match="'bad'.*'q'"):
        scan_stage("bad", scanned.op.axes, 0, tg.sum, x[Var("q")])
    with pytest.raises(tg.ShapeError, match="'bad'"):
        scan_stage("bad", scanned.op.axes, 1, tg.sum, x[a])
    with pytest.raises(tg.TegradError, match="'bad'.*reducer"):
        scan_stage("bad", scanned.op.axes, 0, "sum", x[a])
    k = tg.reduce_axis((0, 3), name="k")
    with pytest.raises(tg.ShapeError, match="'bad'"):
        scan_stage("bad", [k], 0, tg.sum, x[k])


def test_stage_mapper_covers_every_stage_kind(program, scanned):
    from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScanOp, ScatterOp
    assert set(StageMapper._method_names) == {PlaceholderOp, ComputeOp, ScatterOp, ScanOp}
    x, y, s = program
    assert [is_placeholder(t) for t in (x, y, s, scanned)] == [True, False, False, False]
    assert [len(stage_exprs(t)) for t in (x, y, s, scanned)] == [0, 1, 2, 1]
