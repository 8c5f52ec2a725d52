"""``f.schedule`` is a value (a Schedule of steps) that ``tg.build(..., schedule=f.schedule)``
replays: the same loops and the same results for every operator of tegrad.ops and
tegrad.nn (forward and gradient, the entries of the operator table in tests/conftest.py on
shapes scaled at random), every primitive of the table is made by the automatic schedule
or the dict form for some program and replayed, and a step edited by hand that does not
apply raises a TegradError naming its stage."""
import copy
import pickle
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.schedule.primitives import PRIMITIVES
from tegrad.codegen.schedule.steps import Schedule, Step
from tegrad.ir.graph import placeholders

from tests.conftest import Case, OPERATOR_CASES, first_output

#: tolerance of a comparison with the evaluator (sums are added in another order)
TOLERANCE = {"float64": dict(rtol=1e-9, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-5)}

#: entries whose shapes are tied to literal shapes in the entry (the target of a
#: broadcast or a sum), built as they are
UNSCALED = {"broadcast_to", "collapse_sum_to"}


class ScaledCase(Case):
    """A case whose placeholders have every dimension above one multiplied by ``scale``
    (the entries' shapes stay consistent: equal dimensions stay equal, a dimension of one
    stays one)."""

    def __init__(self, seed, dtype, scale):
        super().__init__(seed, dtype)
        self.scale = scale

    def _scaled(self, shape):
        return tuple(d * self.scale if d > 1 else d for d in shape)

    def x(self, shape, *args, **kw):
        return super().x(self._scaled(shape), *args, **kw)

    def ints(self, shape, *args, **kw):
        return super().ints(self._scaled(shape), *args, **kw)

    def mask(self, shape, *args, **kw):
        return super().mask(self._scaled(shape), *args, **kw)


def program(name, dtype, scale):
    """``(inputs, outputs, feed)``: the entry's operator and its gradient for a random
    head."""
    case = ScaledCase(zlib.crc32(name.encode()), dtype, 1 if name in UNSCALED else scale)
    out = first_output(OPERATOR_CASES[name](case))
    head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
    case.feed[head] = case.rng.standard_normal(out.shape)
    outputs = [out] + list(tg.differentiate(out, case.inputs, head=head).optimized())
    inputs = placeholders(outputs)
    feed = {t: np.asarray(case.feed[t] if t in case.feed else
                          case.rng.standard_normal(t.shape)).astype(t.dtype) for t in inputs}
    return inputs, outputs, feed


def replayed(inputs, outputs, threads=2, **options):
    """The automatic build and the build of its schedule, checked to have the same loops
    and schedule."""
    f = tg.build(inputs, outputs, threads=threads, **options)
    g = tg.build(inputs, outputs, threads=threads, schedule=f.schedule)
    assert g.loops == f.loops
    assert g.schedule == f.schedule and hash(g.schedule) == hash(f.schedule)
    return f, g


def assert_same_results(f, g, inputs, outputs, feed, dtype):
    args = [feed[t] for t in inputs]
    got, again = f(*args), g(*args)
    for t, a, b, want in zip(outputs, got, again, tg.evaluate(outputs, feed)):
        np.testing.assert_array_equal(a, b, err_msg=t.name)  # one kernel: bit for bit
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, want, err_msg=t.name, **TOLERANCE[dtype])


@settings(max_examples=1, deadline=None)
@given(scale=st.sampled_from([1, 2]), dtype=st.sampled_from(["float32", "float64"]))
def test_every_operator_and_its_gradient_replay_the_same_loops(operator_name, scale, dtype):
    inputs, outputs, feed = program(operator_name, dtype, scale)
    f, g = replayed(inputs, outputs)
    assert_same_results(f, g, inputs, outputs, feed, dtype)


def test_the_unscaled_entries_are_entries(operator_cases):
    # (that the table covers every operator is test_operators.py's to check)
    assert UNSCALED <= set(operator_cases)


# -- every primitive, made and replayed -----------------------------------------------


def _f32(shape, name, dtype="float32"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _scatter_window():
    x = _f32((2, 3, 13, 14), "x")
    y = nn.max_pool2d(x, 3, stride=1, dilation=2)
    head = _f32(y.shape, "head")
    return [x, head], [y, *tg.differentiate(ops.sum(ops.multiply(y, head)), [x])]


def _embedding_gradient():
    table, ids = _f32((1000, 256), "table"), _f32((4096,), "ids", "int32")
    e = nn.embedding(table, ids)
    head = _f32(e.shape, "head")
    return [table, ids, head], list(tg.differentiate(ops.sum(ops.multiply(e, head)), [table]))


def _guarded_window():
    x = _f32((64,), "x")
    r = tg.reduce_axis((0, 3), name="r")

    def costly(v):  # too large a body to unroll three times
        for t in range(120):
            v = v * (0.5 + t * 1e-3) + tg.sin(v) * 0.25
        return v
    y = tg.compute((64,), lambda i: tg.sum(costly(x[i + r - 1]), axis=r,
                                           where=(i + r - 1 >= 0) & (i + r - 1 < 64)), name="y")
    return [x], [y]


def _dense_step():
    x, w = _f32((64, 96), "x"), _f32((80, 96), "w")
    y = nn.softmax(nn.dense(x, w))
    head = _f32(y.shape, "head")
    return [x, w, head], [y, *tg.differentiate(ops.sum(ops.multiply(y, head)), [x, w])]


def _transpose():
    A = _f32((64, 64), "A")
    return [A], [ops.transpose(A, (1, 0))]


def _large():
    x = _f32((4, 512, 1024), "x")
    return [x], [ops.multiply(x, 2.0)]


def _fused_loops():
    """The large program with its two outer loops fused (by hand: the automatic schedule
    fuses them before a parallel loop, which its writes through ``//`` and ``%`` of the
    fused loop do not allow yet)."""
    inputs, outputs = _large()
    f = tg.build(inputs, outputs, threads=2)
    steps = [s for s in f.schedule if s.primitive != "parallel"]
    return inputs, outputs, {"schedule": Schedule(
        steps + [Step("fuse_loops", "multiply", ("ax0", "ax1"))])}


def _logits():
    x, w = _f32((32, 6760), "x"), _f32((10, 6760), "w")
    return [x, w], [nn.dense(x, w)]


def _rows():
    A = _f32((6, 20), "A", "float64")
    k = tg.reduce_axis((0, 20), name="k")
    S = tg.compute((6,), lambda i: tg.sum(A[i, k] * A[i, k], axis=k), name="S")
    B = tg.compute((6, 20), lambda i, j: A[i, j] / (S[i] + 1.0), name="B")
    return [A], [B]


#: programs, the options they are built with, and the primitives their schedules use
PROGRAMS = {
    "transpose": (_transpose, {}, {"tile", "vector_loops"}),
    "scatter_window": (_scatter_window, {}, {"hoist_window", "if_convert", "fuse"}),
    "embedding_gradient": (_embedding_gradient, {}, {"partition"}),
    "large": (_large, {}, {"parallel"}),
    "fused_loops": (_fused_loops, None, {"fuse_loops"}),
    "guarded_window": (_guarded_window, {}, {"constant_tiny", "guards_to_bounds",
                                             "accumulators"}),
    "dense_step": (_dense_step, {}, {"product", "reuse_stored", "computed_once",
                                     "contractions"}),
    "logits": (_logits, {}, {"product"}),
    "avg_pool_exclude_pad": (lambda: program("avg_pool2d_exclude_pad", "float32", 3)[:2], {},
                             {"split_divisor", "unroll_tiny"}),
    "layer_norm": (lambda: program("layer_norm", "float32", 3)[:2], {}, {"sink"}),
    "by_hand": (_rows, {"schedule": {"B": {"split": {"j": 4}, "order": ["j_o", "i_1"],
                                           "unroll": ["j_i"]},
                                     "S": {"parallel": "i"}}},
                {"split", "order", "unroll", "parallel"}),
    "plain_by_hand": (_dense_step, {"schedule": {"dense": "none"}}, {"plain"}),
    "compute_at_by_hand": (_rows, {"schedule": {"S": {"compute_at": ("B", "i_1")},
                                                "B": {"split": {"j": 4}, "vectorize": "j_i"}}},
                           {"compute_at", "vectorize"}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_program_makes_its_primitives_and_replays_them(name):
    make, options, uses = PROGRAMS[name]
    inputs, outputs, *made_options = make()
    options = made_options[0] if options is None else options
    f, g = replayed(inputs, outputs, **options)
    made = {step.primitive for step in f.schedule}
    assert uses <= made, (uses - made, f.schedule)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    feed = {t: (rng.integers(0, t.shape[0] if t.name != "ids" else 1000, t.shape)
                if t.dtype == "int32" else rng.standard_normal(t.shape)).astype(t.dtype)
            for t in inputs}
    dtype = outputs[0].dtype
    assert_same_results(f, g, inputs, outputs, feed, dtype)


def test_the_programs_make_every_primitive():
    assert set().union(*(uses for _, _, uses in PROGRAMS.values())) == set(PRIMITIVES)


# -- the schedule as a value ----------------------------------------------------------


def test_a_schedule_is_an_immutable_hashable_sequence_of_steps():
    inputs, outputs = _rows()
    f = tg.build(inputs, outputs, threads=1)
    s = f.schedule
    steps = list(s)
    assert all(isinstance(step, Step) for step in steps) and len(s) == len(steps)
    assert s == Schedule(steps) and hash(s) == hash(Schedule(tuple(steps)))
    assert s[1:] == Schedule(steps[1:]) and steps[0] in s and "stage" in s
    assert pickle.loads(pickle.dumps(s)) == s and copy.deepcopy(s) is s
    assert {s: 1}[Schedule(steps)] == 1
    with pytest.raises(AttributeError):
        s.steps = ()
    assert str(Schedule(steps[:1])) == str(steps[0])
    assert repr(s).startswith("Schedule([Step(")
    with pytest.raises(tg.TegradError, match="arguments are names, numbers"):
        Step("split", "B", ("j", [object()]))
    with pytest.raises(tg.TegradError, match="every step is a Step"):
        Schedule(["split"])


def test_a_schedule_edited_by_hand_is_obeyed():
    inputs, outputs = _rows()
    f = tg.build(inputs, outputs, threads=1)
    (vector,) = [s for s in f.schedule if s.primitive == "vector_loops"]
    plain = tg.build(inputs, outputs, threads=1,
                     schedule=Schedule([s for s in f.schedule if s is not vector]))
    assert plain.loops != f.loops and "vectorized" not in plain.loops.replace(
        "vectorized for (k", "")
    assert vector not in plain.schedule
    a = np.random.default_rng(3).standard_normal(inputs[0].shape)
    np.testing.assert_allclose(plain(a)[0], tg.evaluate(outputs, {inputs[0]: a})[0],
                               rtol=1e-12)


def test_one_thread_leaves_the_parallel_steps_out_and_exports_replay():
    inputs, outputs = _large()
    f = tg.build(inputs, outputs, threads=2)
    assert any(s.primitive == "parallel" for s in f.schedule)
    one = tg.build(inputs, outputs, threads=1, schedule=f.schedule)
    assert " parallel" not in one.loops
    assert not any(s.primitive in ("parallel", "partition") for s in one.schedule)
    assert tg.build(inputs, outputs, threads=1).loops == one.loops


@pytest.mark.parametrize("make", [_large, _embedding_gradient,
                                  lambda: program("softmax_cross_entropy", "float64", 2)[:2]])
def test_plain_schedules_replay_their_parallel_steps(make):
    inputs, outputs = make()
    f = tg.build(inputs, outputs, threads=2, schedule="none")
    g = tg.build(inputs, outputs, threads=2, schedule=f.schedule)
    assert g.loops == f.loops
    assert all(s.primitive in ("parallel", "partition") for s in f.schedule)


def test_a_dict_schedule_is_recorded_as_its_steps():
    inputs, outputs = _rows()
    f = tg.build(inputs, outputs, threads=1, schedule={"B": {"split": {"j": 8}}})
    assert Step("split", "B", ("j", 8)) in f.schedule
    assert "stage B (as given)" in f.schedule
    g = tg.build(inputs, outputs, threads=1, schedule=f.schedule)
    assert g.loops == f.loops


# -- steps that do not apply -------------------------------------------------------------


def _edit(schedule, old, new):
    """``schedule`` with its first step of primitive ``old`` replaced by ``new(step)``
    (a list of steps), or the steps ``new(None)`` added at the end when there is none."""
    steps = list(schedule)
    for k, step in enumerate(steps):
        if step.primitive == old:
            return Schedule(steps[:k] + new(step) + steps[k + 1:])
    return Schedule(steps + new(None))


#: (program, edit of its schedule, the stage the error names, words of the error)
BAD_EDITS = {
    "unknown primitive": ("rows", lambda s: _edit(s, "", lambda _: [Step("warp", "B", ())]),
                          "B", "unknown primitive 'warp'"),
    "unknown stage": ("rows", lambda s: _edit(s, "", lambda _: [
        Step("vector_loops", "Q", ("j",))]), "Q", "no stage named 'Q'"),
    "unknown loop": ("rows", lambda s: _edit(s, "", lambda _: [Step("unroll", "B", ("q",))]),
                     "B", "has no loop 'q'"),
    "wrong arity": ("rows", lambda s: _edit(s, "", lambda _: [Step("split", "B", ("j",))]),
                    "B", "split takes (loop, factor)"),
    "pass that does not apply": ("rows", lambda s: _edit(s, "", lambda _: [
        Step("tile", "S", ("i",))]), "S", "tile does not apply to i"),
    "lanes the target has not": ("rows", lambda s: _edit(s, "accumulators", lambda st: [
        Step(st.primitive, st.stage, ((st.args[0][0], st.args[0][1] + 1),))]),
        "S", "lanes"),
    "a long loop unrolled": ("large", lambda s: _edit(s, "", lambda _: [
        Step("unroll", "multiply", ("ax2",))]), "multiply", "more than the 64"),
    "a reduction run in parallel": ("rows", lambda s: _edit(s, "", lambda _: [
        Step("parallel", "S", ("k_o",))]), "S", "parallelize 'k_o'"),
    "stages that cannot fuse": ("rows", lambda s: _edit(s, "fuse", lambda st: [
        Step("fuse", "B", (st.stage,))]), "B", "cannot be fused"),
    "a value nothing reads back": ("rows", lambda s: _edit(s, "", lambda _: [
        Step("reuse_stored", "B", ())]), "B", "reuse_stored does not apply"),
    "a partition of no scatter": ("large", lambda s: _edit(s, "", lambda _: [
        Step("partition", "multiply", (2,))]), "multiply", "partition"),
    "a parallel loop inside one": ("large", lambda s: _edit(s, "", lambda _: [
        Step("parallel", "multiply", ("ax2",))]), "multiply", "is parallel"),
    "a product the target does not give": ("logits", lambda s: _edit(s, "product", lambda st: [
        Step("product", st.stage, (st.args[0][:-1] + (st.args[0][-1] * 2,),))]),
        "dense", "its product step asks for"),
    "a plain stage that is none": ("rows", lambda s: _edit(s, "", lambda _: [
        Step("plain", "Q", ())]), "Q", "no stage named 'Q'"),
    "a product of a stage with no plan": ("rows", lambda s: _edit(s, "product", lambda _: [
        Step("product", "B", (("gemm", 1, 6, 20, 1, 6, 16, 256, 256),))]), "B",
        "its product step asks for"),
}


def _bad_program(name):
    return {"rows": _rows, "large": _large, "logits": _logits}[name]()


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_a_step_that_does_not_apply_is_refused_naming_its_stage(case):
    name, edit, stage, words = BAD_EDITS[case]
    inputs, outputs = _bad_program(name)
    f = tg.build(inputs, outputs, threads=2)
    with pytest.raises(tg.TegradError) as info:
        tg.build(inputs, outputs, threads=2, schedule=edit(f.schedule))
    message = str(info.value)
    assert repr(stage) in message and words in message, message
