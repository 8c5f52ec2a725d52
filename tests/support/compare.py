"""A compiled function against the evaluator: ``feed_of`` draws arrays for placeholders,
``check_build`` builds a program and compares every output with ``tg.evaluate``'s (the
product tests of ``tests/codegen/lower``).
"""
import numpy as np

import tegrad as tg


def feed_of(tensors, seed=0):
    """Standard normal arrays of the tensors' shapes and dtypes."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(t.dtype) for t in tensors]


def check_build(inputs, outputs, arrays, rtol, threads=2):
    """``tg.build`` on ``threads`` threads equals ``tg.evaluate`` on ``arrays`` (every
    output, the results of a tuple output each); returns the compiled function."""
    f = tg.build(inputs, outputs, threads=threads)
    got = f(*arrays)
    flat = []
    for o in outputs:
        flat.extend(o.result if hasattr(o, "result") else [o])
    expected = tg.evaluate(flat, dict(zip(inputs, arrays)))
    for g, e, t in zip(got, expected, flat):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * 10, err_msg=t.name)
    return f


def same_in_interpreter(kernel, transform, seed):
    """``transform(kernel)``, checked to give the same bits as ``kernel`` in the loop
    interpreter on uniform inputs drawn from ``seed`` (a pass over loop-IR kernels)."""
    from tegrad.codegen.loops.interpret import run
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1, 1, b.shape).astype(b.dtype) for b in kernel.args
              if b.scope == "input"]
    changed = transform(kernel)
    want, _ = run(kernel, inputs)
    got, _ = run(changed, inputs)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    return changed


def executable_twice_equals_interpreter(kernel, seed, **options):
    """The one-input, one-output ``kernel`` compiled (``Executable(kernel, **options)``)
    equals the loop interpreter (which keeps every buffer apart) on a uniform input drawn
    from ``seed``, called twice (the second call on storage holding the first call's
    values); returns the executable."""
    from tegrad.codegen.loops.interpret import run
    from tegrad.codegen.runtime.executable import Executable
    x = kernel.args[0]
    data = np.random.default_rng(seed).uniform(-1, 1, x.shape).astype(x.dtype)
    (want,), _ = run(kernel, [data])
    tol = 1e-12 if x.dtype == "float64" else 1e-5
    exe = Executable(kernel, **options)
    for _ in range(2):
        got = np.full(want.shape, np.nan, dtype=want.dtype)
        exe.run([data, got])
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    return exe


def built_twice_equals_evaluator(inputs, outputs, seed, dtype, threads):
    """``tg.build`` of the program on ``threads`` threads equals ``tg.evaluate`` on
    uniform arrays drawn from ``seed``, called twice (the second call finds the shared
    storage holding the first call's values)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, t.shape).astype(dtype) for t in inputs]
    f = tg.build(inputs, outputs, threads=threads)
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    tol = 1e-10 if dtype == "float64" else 2e-4
    for _ in range(2):
        for a, b in zip(f(*arrays), want):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
