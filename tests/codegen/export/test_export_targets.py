"""Export checks ``cpu`` and ``features`` against the target before LLVM sees them: a
misspelt CPU name made LLVM stop the process ("64-bit code requested on a subtarget that
doesn't support it!"), so the bad calls run in a child process."""
import json
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import pytest

import tegrad as tg
from tegrad.codegen.export.targets import processor_names, target_spec

X86 = "x86_64-linux-gnu"

_BAD_CALLS = textwrap.dedent("""
    import json, sys
    import tegrad as tg
    x = tg.placeholder((4,), name="x")
    y = tg.compute((4,), lambda i: x[i] * 2, name="y")
    out = []
    for options in json.loads(sys.argv[2]):
        try:
            tg.export([x], [y], sys.argv[1] + "/k", **options)
            out.append("exported")
        except tg.TegradError as e:
            out.append(f"{type(e).__name__}: {e}")
    print(json.dumps(out))
""")


def test_unknown_cpu_and_feature_raise_with_close_matches(tmp_path):
    calls = [{"target": X86, "cpu": "haswel"},
             {"target": X86, "cpu": "haswell", "features": "+avx2,+avx9"},
             {"target": "aarch64-linux-gnu", "cpu": "cortex-a72x"}]
    done = subprocess.run([sys.executable, "-c", _BAD_CALLS, str(tmp_path), json.dumps(calls)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cpu, feature, arm = json.loads(done.stdout.strip().splitlines()[-1])
    assert cpu.startswith("ExportError: unknown CPU 'haswel' for target x86_64-unknown-linux-gnu")
    assert "did you mean 'haswell'" in cpu
    assert feature.startswith("ExportError: unknown feature 'avx9'") and "'avx2'" in feature
    assert "unknown CPU 'cortex-a72x'" in arm and "'cortex-a72'" in arm


def test_feature_without_sign_is_refused():
    with pytest.raises(tg.TegradError, match=r"'avx2'.*'\+name'"):
        target_spec(X86, cpu="haswell", features="avx2")
    with pytest.raises(tg.TegradError, match="cpu must be"):
        target_spec(X86, cpu="")


def test_known_names_are_listed():
    cpus, features = processor_names("x86_64-unknown-linux-gnu")
    assert {"haswell", "x86-64", "generic"} <= cpus and {"avx2", "fma"} <= features
    if llvm.get_process_triple().startswith("x86_64"):
        assert llvm.get_host_cpu_name() in cpus


def test_valid_cpu_and_features_still_export(tmp_path):
    x = tg.placeholder((4,), name="x")
    y = tg.compute((4,), lambda i: x[i] * 2, name="y")
    result = tg.export([x], [y], tmp_path / "k", target=X86, cpu="haswell",
                       features="+avx2,-avx512f")
    assert (result.target.cpu, result.target.features) == ("haswell", "+avx2,-avx512f")
    assert "cpu haswell, +avx2,-avx512f" in result.header_path.read_text()
    assert result.object_path.stat().st_size > 0
