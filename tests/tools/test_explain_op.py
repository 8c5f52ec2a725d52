"""The explainer's operator table covers the library, and attributes parse."""
import pytest

import tegrad as tg
from tegrad import nn, ops
from tegrad.tools import cli
from tegrad.tools.explain_op import (NOT_DIFFERENTIABLE, SAMPLES, ExplainError, attributes,
                                     build_operator, explain, parse_value)


def test_every_operator_has_a_sample_or_no_derivative():
    library = set(ops.__all__) | set(nn.__all__)
    assert set(SAMPLES) | NOT_DIFFERENTIABLE == library
    assert not set(SAMPLES) & NOT_DIFFERENTIABLE


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_builds_and_is_differentiated(name):
    text = explain(name)
    out, _, _ = build_operator(name)
    assert text.startswith(f"{name}(")
    assert f"d{out.name}/d" in text
    assert "before zero elimination (iterations=" in text


def test_overrides_reach_the_operator():
    out, _, attrs = build_operator("max_pool2d", {"kernel": 3, "stride": 1, "padding": 1})
    assert attrs == {"kernel": 3, "stride": 1, "padding": 1}
    assert out.shape == (1, 2, 6, 6)


def test_attributes_are_the_non_tensor_parameters():
    assert attributes("dense") == []
    assert attributes("conv2d") == ["stride", "padding", "dilation", "groups"]


def test_unknown_names_raise_with_the_list():
    with pytest.raises(ExplainError, match="no derivative"):
        build_operator("argmax")
    with pytest.raises(ExplainError, match="attributes: none"):
        build_operator("relu", {"alpha": 0.1})
    with pytest.raises(tg.TegradError):
        build_operator("conv2d", {"stride": 0})


def test_values_parse_as_python_literals():
    assert parse_value("-1") == -1
    assert parse_value("[1, 2]") == (1, 2)
    assert parse_value("NCHW4c") == "NCHW4c"
    assert parse_value("1e-3") == 0.001


def test_attribute_tokens():
    assert cli._attribute_pairs(["--stride", "2", "--ceil-mode=true", "--axis", "-1"]) == {
        "stride": 2, "ceil_mode": True, "axis": -1}
    with pytest.raises(cli._UsageError, match="no value"):
        cli._attribute_pairs(["--stride"])
    with pytest.raises(cli._UsageError, match="expected --attribute"):
        cli._attribute_pairs(["2"])
