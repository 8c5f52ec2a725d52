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
