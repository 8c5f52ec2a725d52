"""A failed run-time check names the tensor whose values were used as the index (or the
divisor), the tensor indexed and the stage, in compiled and exported code."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen import build
from tegrad.codegen.export.program import export


def _cross_entropy():
    logits = tg.placeholder((4, 5), dtype="float64", name="logits")
    labels = tg.placeholder((4,), dtype="int32", name="labels")
    loss = tg.nn.softmax_cross_entropy(logits, labels)
    (dlogits,) = tg.differentiate(loss, [logits])
    return [logits, labels], [loss, dlogits]


def test_out_of_range_labels_name_the_labels_the_logits_and_the_stage():
    inputs, outputs = _cross_entropy()
    f = build(inputs, outputs)
    good = np.array([0, 1, 4, 2], dtype=np.int32)
    f(np.zeros((4, 5)), good)
    for bad in (7, -1):
        with pytest.raises(tg.OutOfBoundsError, match="^'labels': index out of range: .* "
                                                      "'logits' \\(in stage 'softmax_cross_entropy'\\)$"):
            f(np.zeros((4, 5)), np.array([0, 1, bad, 2], dtype=np.int32))


def test_gradient_scatter_names_the_labels_and_the_gradient():
    logits, labels = tg.placeholder((4, 5), "float64", "logits"), tg.placeholder((4,), "int32", "labels")
    picked = tg.compute((4,), lambda n: logits[n, labels[n]], name="picked")
    head = tg.placeholder((4,), "float64", "head")
    (dlogits,) = tg.differentiate(picked, [logits], head=head)
    f = build([logits, labels, head], [dlogits])
    with pytest.raises(tg.OutOfBoundsError, match="^'labels': index out of range: .*'dlogits'"):
        f(np.zeros((4, 5)), np.array([0, 9, 0, 0], dtype=np.int32), np.ones(4))


def test_division_by_zero_names_the_divisor_and_the_stage():
    a = tg.placeholder((3,), dtype="int32", name="a")
    b = tg.placeholder((3,), dtype="int32", name="b")
    q = tg.compute((3,), lambda i: a[i] // b[i], name="q")
    with pytest.raises(tg.TegradError, match="^'b': integer division by zero: .* \\(in stage 'q'\\)$"):
        build([a, b], [q])(np.ones(3, np.int32), np.array([1, 0, 1], np.int32))


def test_exported_error_strings_name_the_labels(tmp_path):
    inputs, outputs = _cross_entropy()
    result = export(inputs, outputs, tmp_path / "sce")
    (entry,) = result.entries
    messages = [entry.error_message(code) for code, _, _ in entry.checks]
    assert messages and all(m.startswith("'labels': index out of range") for m in messages)
    assert any("'logits' (in stage 'softmax_cross_entropy')" in m for m in messages)
    assert messages[0] in result.header_path.read_text()
