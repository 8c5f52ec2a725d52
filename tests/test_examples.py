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


def _readme():
    return (EXAMPLES.parent / "README.md").read_text()


def test_the_zero_elimination_example_prints_what_its_comments_say(capsys):
    import re

    import tegrad as tg
    text = _readme()
    block = text[text.index('x = tg.placeholder((8, 3, 32, 32), name="x")'):]
    block = block[:block.index("```")]
    before, after = re.search(r"# dx: iterations=(\d+) before, iterations=(\d+) after",
                              block).groups()
    forward = re.search(r"# the forward pass: iterations=(\d+)", block).group(1)
    scope = {"tg": tg}
    exec(block.replace("res.explain()", "printed = res.explain()")
         .replace("tg.cost(y)", "forward_cost = tg.cost(y)"), scope)
    dx = scope["printed"].split("dconv2d/dw:")[0]
    assert f"before zero elimination (iterations={before}," in dx
    assert f"after zero elimination (iterations={after}," in dx
    assert scope["forward_cost"].iterations == int(forward)
