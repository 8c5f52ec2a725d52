"""The README's examples print what their comments say."""
import re
from pathlib import Path

import tegrad as tg

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_zero_elimination_example_prints_what_its_comments_say():
    text = README.read_text()
    block = text[text.index('x = tg.placeholder((8, 3, 32, 32), name="x")'):]
    block = block[:block.index("```")]
    before, after = re.search(r"# dx: iterations=(\d+) before, iterations=(\d+) after",
                              block).groups()
    forward = re.search(r"# the forward pass: iterations=(\d+)", block).group(1)
    scope = {"tg": tg}
    exec(block.replace("print(res.explain())", "printed = res.explain()")
         .replace("tg.cost(y)", "forward_cost = tg.cost(y)"), scope)
    dx = scope["printed"].split("dconv2d/dw:")[0]
    assert f"before zero elimination (iterations={before}," in dx
    assert f"after zero elimination (iterations={after}," in dx
    assert scope["forward_cost"].iterations == int(forward)
