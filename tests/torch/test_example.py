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
