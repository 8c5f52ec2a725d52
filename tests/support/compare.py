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
