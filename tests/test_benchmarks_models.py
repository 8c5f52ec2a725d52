"""Smoke test of benchmarks/models.py: every model, at tiny sizes and in float64, gives
PyTorch's loss and gradients (through the reference evaluator; one model compiled), and
the char-LM's numpy Adam takes torch.optim.Adam's steps. No timing."""
import os
import sys

import numpy as np
import pytest

import tegrad as tg

torch = pytest.importorskip("torch")

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")


@pytest.fixture(scope="module")
def models():
    sys.path.insert(0, BENCHMARKS)
    try:
        import models
    finally:
        sys.path.remove(BENCHMARKS)
    return models


@pytest.mark.parametrize("name", ["lenet", "resnet", "transformer", "gru", "tcn"])
def test_model_matches_pytorch(models, name):
    model = models.MODELS[name](**models.TINY[name], dtype="float64")
    arrays = model.arrays(np.random.default_rng(0))
    reference = models.torch_reference(model, arrays)
    placeholders, outputs, _ = model.program()
    assert len(outputs) == 1 + len(model.wrt) and outputs[0].shape == ()
    results = tg.evaluate(outputs, dict(zip(placeholders, model.tegrad_args(arrays))))
    assert models.max_difference(reference, results) < 1e-9


def test_compiled_model_matches_pytorch(models):
    model = models.tcn(**models.TINY["tcn"], dtype="float64")
    arrays = model.arrays(np.random.default_rng(1))
    call, results, info = models.tegrad_contender(model, arrays, threads=1, memory=False)
    assert models.max_difference(models.torch_reference(model, arrays), results) < 1e-9
    assert models.max_difference(results, call()) == 0.0
    assert info["build_s"] > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_resnet_block_holds_the_skip_gradient_in_the_input_gradient(models, threads):
    # dx = (the first convolution's transposed product) + (the skip's gradient): the
    # skip's gradient is computed in dx's memory and the product adds onto it
    from tegrad.codegen.loops.mapper import walk_stmts
    from tegrad.codegen.loops.nodes import MatrixProduct
    model = models.resnet_block(**models.TINY["resnet"], dtype="float64")
    arrays = model.arrays(np.random.default_rng(4))
    placeholders, outputs, _ = model.program()
    f = tg.build(placeholders, outputs, threads=threads)
    results = f(*model.tegrad_args(arrays))
    assert models.max_difference(models.torch_reference(model, arrays), results) < 1e-9
    onto = [s.c.name for s in walk_stmts(f.kernel.body)
            if type(s) is MatrixProduct and s.spec.accumulate]
    assert "dx" in onto, f.loops
    # a weight that is not finite: the products' loops run instead, adding the skip's
    # gradient where it is (dx's memory)
    args = model.tegrad_args(arrays)
    w1 = [i.name for i in model.inputs].index("w1")
    args[w1] = args[w1].copy()
    args[w1].flat[5] = np.inf
    want = tg.evaluate(outputs, dict(zip(placeholders, args)))
    for got, expected in zip(f(*args), want):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_numpy_adam_is_torch_adam(models):
    rng = np.random.default_rng(2)
    p = rng.standard_normal((3, 4))
    grads = [rng.standard_normal((3, 4)) for _ in range(5)]
    mine = [p.copy()]
    adam = models.NumpyAdam(mine, lr=0.1)
    theirs = torch.tensor(p, requires_grad=True)
    opt = torch.optim.Adam([theirs], lr=0.1)
    for g in grads:
        adam.step([g])
        theirs.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(mine[0], theirs.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_corpus_is_the_vocabulary(models):
    text = models.corpus()
    assert len(text) > 10000 and text.min() >= 0 and text.max() < 96
