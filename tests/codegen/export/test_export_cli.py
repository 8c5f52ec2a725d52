"""The ``export`` command: loading a model file and exporting what it defines.

Lowering is replaced by one that checks the model's tensors against ``tg.evaluate`` and
returns the hand-built kernel of ``tests/support/export_sample.py`` (whose hand-written
module stands in for the backend), so the command's own work is what is tested.
"""
import struct
import textwrap

import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen.export.cli import export_main

from support import export_sample as sample

MODEL = textwrap.dedent("""
    import tegrad as tg
    N = 37
    x = tg.placeholder((N,), name="x")
    idx = tg.placeholder((N,), dtype="int32", name="idx")
    w = tg.placeholder((), name="w")
    b = tg.placeholder((), name="b")
    d = tg.placeholder((), dtype="int32", name="d")
    y = tg.compute((N,), lambda i: x[idx[i]] * w[()] + b[()], name="y")
    q = tg.compute((N,), lambda i: tg.floordiv(idx[i], d[()]), name="q")
    {tail}
    if __name__ == "__main__":
        raise SystemExit("the command must not run the model's main block")
""")


def fake_lower(inputs, outputs, *, name):
    """The sample kernel, after checking that the model computes what it computes."""
    assert [t.name for t in inputs] == ["x", "idx", "w", "b", "d"]
    values = sample.sample_inputs()
    got = tg.evaluate(list(outputs), dict(zip(inputs, [np.asarray(v) for v in values])))
    for have, want in zip(got, sample.reference(*values)):
        np.testing.assert_allclose(have, want, rtol=1e-6)
    return sample.sample_kernel(name)


def run(tmp_path, tail, *args):
    model = tmp_path / "model.py"
    model.write_text(MODEL.format(tail=tail))
    return export_main([str(model), *args], lower=fake_lower, make_module=sample.sample_module)


def test_inputs_and_outputs_make_one_entry_point_named_after_the_output(tmp_path, capsys):
    out = tmp_path / "build" / "step"
    assert run(tmp_path, "inputs, outputs = [x, idx, w, b, d], [y, q]", "-o", str(out)) == 0
    header = (tmp_path / "build" / "step.h").read_text()
    assert "int step(const float *x, const int32_t *idx," in header
    assert (tmp_path / "build" / "step.o").exists() and (tmp_path / "build" / "step.so").exists()
    assert "exported step for" in capsys.readouterr().out


def test_exports_dict_makes_several_entry_points(tmp_path):
    tail = ("exports = {'train': ([x, idx, w, b, d], [y, q]), "
            "'evaluate': ([x, idx, w, b, d], [y, q])}")
    assert run(tmp_path, tail, "-o", str(tmp_path / "lib")) == 0
    header = (tmp_path / "lib.h").read_text()
    assert "int train(" in header and "int evaluate(" in header


def test_target_option_writes_an_aarch64_object(tmp_path):
    tail = "inputs, outputs = [x, idx, w, b, d], [y, q]"
    assert run(tmp_path, tail, "-o", str(tmp_path / "arm"), "--target", "aarch64-linux-gnu",
               "--name", "arm_step") == 0
    data = (tmp_path / "arm.o").read_bytes()
    assert data[:4] == b"\x7fELF" and struct.unpack_from("<H", data, 18)[0] == 183
    assert "int arm_step(" in (tmp_path / "arm.h").read_text()


@pytest.mark.parametrize("tail, message", [
    ("", "defines neither `inputs` and `outputs` nor `exports`"),
    ("inputs, outputs = [x, idx, w, b, d], y", "not the single tensor 'y'"),
    ("inputs, outputs = 'x', [y]", "must be a list of tensors"),
    ("exports = []", "`exports` must be a non-empty dict"),
    ("inputs = undefined_name", "raised NameError: name 'undefined_name' is not defined"),
    ("z = tg.placeholder((2,), dtype='complex', name='z')", "unsupported dtype 'complex'"),
])
def test_model_file_mistakes_are_reported(tmp_path, capsys, tail, message):
    assert run(tmp_path, tail, "-o", str(tmp_path / "out")) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.o").exists()


def test_missing_model_file_is_reported(tmp_path, capsys):
    assert export_main([str(tmp_path / "nope.py")], lower=fake_lower,
                       make_module=sample.sample_module) == 1
    assert "not found" in capsys.readouterr().err


def test_the_command_fits_a_parser_with_subcommands(tmp_path, capsys):
    import argparse
    from tegrad.codegen.export import cli
    top = argparse.ArgumentParser(prog="tegrad")
    cli.add_arguments(top.add_subparsers(dest="command").add_parser("export", help=cli.HELP))
    model = tmp_path / "model.py"
    model.write_text(MODEL.format(tail="inputs, outputs = [x, idx, w, b, d], [y, q]"))
    args = top.parse_args(["export", str(model), "-o", str(tmp_path / "sub")])
    result = cli.run(args, lower=fake_lower, make_module=sample.sample_module)
    assert [e.name for e in result.entries] == ["sub"] and result.object_path.exists()
