"""Every operator of the gradient table (tests/conftest.py), wrapped as a PyTorch operator,
passes PyTorch's own first- and second-derivative checks (float64, finite differences)."""
import pytest
import torch

import tegrad.torch as tgt


def wrapped(case, output, name):
    """The operator, its tensors (the placeholders' feeds, in the case's order), and which
    of them ask for a gradient."""
    placeholders = list(case.feed)
    op = tgt.operator(placeholders, [output], name=name)
    diff = {id(t) for t in case.inputs}
    tensors = tuple(torch.from_numpy(case.feed[t].copy()).requires_grad_(id(t) in diff)
                    for t in placeholders)
    return op, tensors


def test_gradcheck_and_gradgradcheck(operator_name, operator_case):
    case, output = operator_case
    op, tensors = wrapped(case, output, f"table_{operator_name}")
    # fast mode checks random projections of the Jacobians: the same mistakes are caught
    # with a few calls instead of one per element
    assert torch.autograd.gradcheck(op, tensors, eps=1e-6, atol=1e-5, fast_mode=True)
    assert torch.autograd.gradgradcheck(op, tensors, eps=1e-6, atol=1e-5, fast_mode=True)


@pytest.mark.parametrize("name", ["dense", "softmax_cross_entropy", "max_pool2d", "concatenate",
                                  "take_axis_clip", "batch_norm_train"])
def test_opcheck(name, operator_case_of):
    case, output = operator_case_of(name)
    op, tensors = wrapped(case, output, f"table_{name}")
    results = torch.library.opcheck(op.custom_op, tensors)
    assert set(results.values()) == {"SUCCESS"}, results
