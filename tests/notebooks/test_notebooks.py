"""Every notebook of notebooks/ runs top to bottom (its cells assert their key results),
and is committed executed, with its outputs."""
import json
import pathlib
import re
import sys

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
KERNEL = "tegrad-tests"


def kernel_manager(folder):
    """A kernel running this interpreter (whatever kernels the machine has registered),
    with matplotlib's non-interactive Agg backend; its spec is written under ``folder``."""
    spec = pathlib.Path(folder) / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tegrad tests", "language": "python",
        "env": {"MPLBACKEND": "Agg"}}))
    specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)


def execute(path, folder):
    """Run the notebook at ``path`` in a fresh kernel; returns the executed notebook."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, km=kernel_manager(folder), timeout=600,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def test_there_are_the_four_tutorials():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb", "02_train_mlp.ipynb", "03_zero_elimination.ipynb",
        "04_custom_gradients.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_executed(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


def _outputs(path):
    nb = nbformat.read(path, as_version=4)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def test_figures_are_committed_as_pngs():
    figures = {p.stem[:2]: sum("image/png" in o.get("data", {}) for o in _outputs(p))
               for p in NOTEBOOKS}
    assert sum(figures.values()) >= 6, figures
    assert all(figures[n] >= 1 for n in ("02", "03", "04")), figures


def test_outputs_are_small_and_times_readable():
    for path in NOTEBOOKS:
        text = "".join(o.get("text", "") for o in _outputs(path))
        assert len(text) < 20_000, path.name
        assert not re.search(r"\b0\.00 ms", text), path.name


def test_the_quickstart_uses_the_public_api_only():
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "tg.build(" in code
    assert not re.search(r"tegrad\.(tools|codegen|ir|autodiff|zero_elim)|compile_program", code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    nb = execute(path, tmp_path)
    assert all(c.execution_count is not None for c in nb.cells if c.cell_type == "code")
