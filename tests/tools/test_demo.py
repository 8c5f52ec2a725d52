"""The demo's pieces: the split, the models' step against the evaluator, padded prediction."""
import numpy as np

import tegrad as tg
from tegrad import nn
from tegrad.tools import demo


def test_split_is_fixed_and_scaled():
    a, b = demo.load_digits_split(), demo.load_digits_split()
    assert a.x_train.shape == (1438, 64) and a.x_test.shape == (359, 64)
    assert np.array_equal(a.y_test, b.y_test)
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int32
    assert a.x_train.min() == 0.0 and a.x_train.max() == 1.0


def test_cnn_step_matches_the_evaluator_and_descends():
    model = demo.cnn(hidden=4)
    compiled = demo.compile_model(model, 16)
    weights = demo.init_weights(model, seed=1)
    data = demo.load_digits_split()
    x, y = data.x_train[:16], data.y_train[:16]
    loss, logits, *grads = compiled.step(x, y, *weights.values())
    images = tg.placeholder((16, 64), name="images")
    labels = tg.placeholder((16,), dtype="int32", name="labels")
    ref_loss = nn.softmax_cross_entropy(model.forward(images), labels)
    feed = {images: x, labels: y, **{model.weights[k]: v for k, v in weights.items()}}
    np.testing.assert_allclose(loss, tg.evaluate(ref_loss, feed), rtol=1e-5)
    assert [g.shape for g in grads] == [t.shape for t in model.weights.values()]
    for _ in range(10):  # gradient descent on this batch lowers its loss
        for k, g in zip(weights, grads):
            weights[k] -= 0.3 * g
        new_loss, _, *grads = compiled.step(x, y, *weights.values())
    assert new_loss < 0.9 * loss


def test_prediction_pads_the_last_batch():
    model = demo.mlp(hidden=8)
    compiled = demo.compile_model(model, 4)
    weights = demo.init_weights(model, seed=0)
    images = np.random.default_rng(0).random((demo.EVAL_BATCH + 7, 64), dtype=np.float32)
    x = tg.placeholder((len(images), 64), name="x")
    feed = {x: images, **{model.weights[k]: v for k, v in weights.items()}}
    want = tg.evaluate(model.forward(x), feed).argmax(axis=1)
    assert np.array_equal(demo.predict(compiled, weights, images), want)
