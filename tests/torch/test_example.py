"""examples/torch_custom_op.py trains both models to the same losses (a few steps)."""
import importlib.util
import pathlib

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch_custom_op.py"


def test_the_example_trains_both_models_to_the_same_losses(capsys):
    spec = importlib.util.spec_from_file_location("torch_custom_op_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    losses, ms = example.main(["--steps", "4", "--batch", "16", "--hidden", "32",
                               "--print-every", "1"])
    assert len(losses["tegrad"]) == len(losses["pytorch"]) == 4
    for a, b in zip(losses["tegrad"], losses["pytorch"]):
        assert abs(a - b) <= 1e-5 * abs(b)
    printed = capsys.readouterr().out
    assert "ms per training step" in printed and set(ms) == {"tegrad", "pytorch"}


def test_the_overhead_timer_calls_both_on_the_same_tensors():
    spec = importlib.util.spec_from_file_location("torch_custom_op_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    import torch
    import tegrad.torch
    op = tegrad.torch.operator(*example.layer_norm_gelu_program(2, 4), name="ln_gelu_timer")
    calls = []
    compiled = op.function
    op.function = lambda *arrays: calls.append(arrays) or compiled(*arrays)
    us = example.call_overhead(op, [torch.randn(2, 4), torch.ones(4), torch.zeros(4)],
                               calls=3, rounds=2)
    assert set(us) == {"operator", "compiled"}
    assert all(len(v) == 2 and min(v) > 0 for v in us.values())  # one figure per round
    assert len(calls) == 12  # 3 calls x 2 rounds, each of the operator and of the function
