"""The examples of the README run and do what they say."""
import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mlp_training_reduces_the_loss():
    first, last, accuracy = _load("train_mlp").main(steps=80)
    assert last < 0.6 * first
    assert accuracy > 0.6


def test_quickstart_runs(capsys):
    _load("quickstart").main()
    assert "C[i, j] = sum(A[i, k] * B[k, j], k in [0, 6))" in capsys.readouterr().out
