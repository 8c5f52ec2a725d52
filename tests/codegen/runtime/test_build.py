"""``tg.build``: what it accepts, what the compiled function returns and shows, and the
cache of compiled programs."""
import threading

import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen.runtime import builder as build_module


def mlp(dtype="float64", hidden=5, zero=0.0):
    x = tg.placeholder((4, 3), dtype=dtype, name="x")
    w = tg.placeholder((3, hidden), dtype=dtype, name="w")
    k = tg.reduce_axis((0, 3), name="k")
    h = tg.compute((4, hidden), lambda i, j: tg.max(tg.sum(x[i, k] * w[k, j], axis=k), zero),
                   name="h")
    r = tg.reduce_axis((0, 4), name="r")
    s = tg.reduce_axis((0, hidden), name="s")
    loss = tg.compute((), lambda: tg.sum(h[r, s] * h[r, s], axis=[r, s]), name="loss")
    return x, w, loss


def test_forward_and_gradient_in_one_function():
    x, w, loss = mlp()
    f = tg.build([x, w], [loss, tg.differentiate(loss, [x, w]).optimized()])
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    got = f(xv, wv)
    assert isinstance(got, list) and len(got) == 3
    want = tg.evaluate(f.outputs, {x: xv, w: wv})
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-12)
    assert f.inputs == [x, w] and f.outputs[0] is loss


def test_one_output_is_a_list_of_one_array():
    x, w, loss = mlp()
    got = tg.build([x, w], loss)(np.ones((4, 3)), np.ones((3, 5)))
    assert isinstance(got, list) and got[0].shape == () and float(got[0]) == 4 * 5 * 9


def test_loops_llvm_ir_and_asm_are_shown():
    x, w, loss = mlp()
    f = tg.build([x, w], [loss], name="mlp loss")
    assert "kernel mlp_loss(" in f.loops and "for (" in f.loops
    assert "define" in f.llvm_ir and "tegrad.mlp_loss" in f.llvm_ir
    assert "ret" in f.asm
    assert "mlp_loss" in repr(f)


def test_asm_first_does_not_wait_for_itself():
    # the assembly is made from the optimised IR, printed under the same lock
    x, w, loss = mlp()
    f = tg.build([x, w], [loss], name="asm first")
    got = []
    reader = threading.Thread(target=lambda: got.append(f.asm), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert got and "ret" in got[0] and "define" in f.llvm_ir


def test_arguments_by_name():
    x, w, loss = mlp()
    f = tg.build([x, w], [loss])
    a, b = np.arange(12.).reshape(4, 3), np.arange(15.).reshape(3, 5) / 7
    want = f(a, b)[0]
    assert f(x=a, w=b)[0] == want and f(w=b, x=a)[0] == want and f(a, w=b)[0] == want
    got = np.empty(())
    assert f(w=b, x=a, out=[got])[0] is got and got == want
    with pytest.raises(tg.FeedError, match="no input named 'v'"):
        f(a, v=b)
    with pytest.raises(tg.FeedError, match="'w' are not given"):
        f(x=a)
    with pytest.raises(tg.FeedError, match="given twice"):
        f(a, b, x=a)
    with pytest.raises(tg.FeedError, match="takes 2 arguments"):
        f(a, b, a, w=b)
    twin = tg.placeholder((4, 3), dtype=x.dtype, name="x")
    g = tg.build([x, twin], [tg.compute((4, 3), lambda i, j: x[i, j] - twin[i, j])])
    with pytest.raises(tg.FeedError, match="share names"):
        g(x=a)


def test_bad_inputs_and_options_are_errors():
    x, w, loss = mlp()
    with pytest.raises(tg.FeedError, match="'w'"):
        tg.build([x], [loss])
    with pytest.raises(tg.TegradError, match="placeholders"):
        tg.build([x, w, loss], [loss])
    with pytest.raises(tg.TegradError, match="twice"):
        tg.build([x, w, x], [loss])
    with pytest.raises(tg.TegradError, match="threads"):
        tg.build([x, w], [loss], threads=0)
    with pytest.raises(tg.TegradError, match="outputs"):
        tg.build([x, w], [np.zeros(3)])


def test_equal_programs_share_compiled_code(monkeypatch):
    x, w, loss = mlp()
    f = tg.build([x, w], [loss])
    assert tg.build([x, w], [loss]) is f  # the same tensors
    calls = []
    import tegrad.codegen.lower.program as lowering
    monkeypatch.setattr(lowering, "lower_program",
                        lambda *a, **k: calls.append(a) or pytest.fail("compiled again"))
    x2, w2, loss2 = mlp()  # new tensor objects, the same program
    g = tg.build([x2, w2], [loss2])
    assert g is not f and g.inputs == [x2, w2]
    assert g._executable is f._executable
    np.testing.assert_allclose(g(np.ones((4, 3)), np.ones((3, 5)))[0], 180.0)
    assert not calls


@pytest.mark.parametrize("change", ["shape", "dtype", "constant", "signed zero", "order",
                                    "threads", "name"])
def test_different_programs_or_options_do_not_share_compiled_code(change):
    x, w, loss = mlp()
    f = tg.build([x, w], [loss])
    x2, w2, loss2 = mlp(hidden=6 if change == "shape" else 5,
                        dtype="float32" if change == "dtype" else "float64",
                        zero={"constant": 0.5, "signed zero": -0.0}.get(change, 0.0))
    inputs = [w2, x2] if change == "order" else [x2, w2]
    g = tg.build(inputs, [loss2], threads=2 if change == "threads" else None,
                 name="other" if change == "name" else None)
    assert g._executable is not f._executable


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(build_module, "CACHE_SIZE", 2)
    for hidden in (2, 3, 4):
        x, w, loss = mlp(hidden=hidden)
        tg.build([x, w], [loss])
    assert len(build_module._executables) <= 2 and len(build_module._functions) <= 2


def test_pointer_table_path_when_the_python_abi_is_not_confirmed(monkeypatch):
    from tegrad.codegen.runtime import executable
    monkeypatch.setattr(executable, "python_abi", lambda: None)
    build_module.clear_cache()
    X = tg.placeholder((5,), dtype="float64", name="X")
    k = tg.reduce_axis((0, 5), name="k")
    M = tg.compute((), lambda: tg.max(X[k], axis=k), name="M")
    Y = tg.compute((5,), lambda i: X[i] - M[()], name="Y")
    f = tg.build([X], [Y])
    x = np.array([1.0, 5.0, 2.0, -1.0, 0.0])
    np.testing.assert_array_equal(f(x)[0], x - 5.0)
    with pytest.raises(tg.TegradError, match="'Y' overlaps the argument 'X'"):
        f(x, out=[x])
    build_module.clear_cache()


def _small_program(variant):
    """A program, or one changed in a single place (``variant``)."""
    x = tg.placeholder((4, 3), name="x")
    w = tg.placeholder((3, 3), name="w")
    k = tg.reduce_axis((0, 3), name="k")
    reduce = tg.max if variant == "reducer" else tg.sum
    if variant == "swapped reads":
        body = lambda i, j: reduce(w[k, j] * x[i, k], axis=k)  # noqa: E731
    elif variant == "index":
        body = lambda i, j: reduce(x[i, k] * w[j, k], axis=k)  # noqa: E731
    elif variant == "operator":
        body = lambda i, j: reduce(x[i, k] + w[k, j], axis=k)  # noqa: E731
    else:
        body = lambda i, j: reduce(x[i, k] * w[k, j], axis=k)  # noqa: E731
    y = tg.compute((4, 3), body, name="y")
    if variant == "shared":  # one sub-expression used twice: equal to two equal ones
        e = y[0, 0] * 2.0
        z = tg.compute((), lambda: e + e, name="z")
    else:
        z = tg.compute((), lambda: y[0, 0] * 2.0 + y[0, 0] * 2.0, name="z")
    return [x, w], [z]


@pytest.mark.parametrize("variant", ["swapped reads", "index", "operator", "reducer"])
def test_program_keys_tell_programs_apart(variant):
    from tegrad.codegen.runtime.program_key import program_key
    assert program_key(*_small_program(None)) == program_key(*_small_program(None))
    assert program_key(*_small_program("shared")) == program_key(*_small_program(None))
    assert program_key(*_small_program(variant)) != program_key(*_small_program(None))


def test_a_guarded_stage_read_at_a_data_dependent_index():
    """A stage whose guard is a conjunction, read at an index loaded from memory: the
    guard's affine part is proved with the loop IR's affine forms (a load is no affine
    form), not the expression language's (which has no loads)."""
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    idx = tg.compute((4, 3), lambda a, b: tg.cast(tg.abs(x[a, b]) * 3.0, "int32") % 4,
                     name="idx")
    g = tg.compute((4, 3), lambda i, j: tg.if_then_else(tg.all(i >= 2, j >= 1), x[j - 1, 0],
                                                        0.0), name="g")
    y = tg.compute((4, 3), lambda i, j: g[idx[i, j], j] * 2.0, name="y")
    a = np.random.default_rng(0).uniform(-1, 1, (4, 3))
    np.testing.assert_array_equal(tg.build([x], [y])(a)[0], tg.evaluate(y, {x: a}))
