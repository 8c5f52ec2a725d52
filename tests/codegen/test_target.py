"""One Target for the JIT and for exports: kernels are blocked and vectorised for the
target's vector registers, not the host's (an aarch64 export: 128-bit NEON vectors)."""
import re

import numpy as np
import pytest

import tegrad as tg
from tegrad.codegen.target import Target, TargetError

from support.programs import matmul, mlp_gradient  # a 64x64 float32 matmul; an MLP's gradient

X86 = "x86_64-linux-gnu"
ARM = "aarch64-unknown-linux-gnu"


def widest_float_vector(ll_text):
    """The widest ``<N x float>`` / ``<N x double>`` of an LLVM module, in bits."""
    sizes = {"float": 32, "double": 64}
    return max((int(n) * sizes[t] for n, t in re.findall(r"<(\d+) x (float|double)>", ll_text)),
               default=0)


def test_host_is_cached_hashable_and_equal():
    assert Target.host() == Target.host() and hash(Target.host()) == hash(Target.host())
    assert Target.host().vector_bits in (128, 256, 512)
    assert {Target.host(): 1}[Target.host()] == 1


@pytest.mark.parametrize("triple, cpu, bits, registers", [
    (ARM, None, 128, 32), (X86, "haswell", 256, 16), (X86, "skylake-avx512", 512, 32),
    (X86, "x86-64", 128, 16)])
def test_parse_reads_the_vector_width_of_the_target(triple, cpu, bits, registers):
    t = Target.parse(triple, cpu=cpu)
    assert (t.vector_bits, t.vector_registers) == (bits, registers)
    assert t == Target.parse(triple, cpu=cpu) and hash(t) == hash(Target.parse(triple, cpu=cpu))


def test_parse_refuses_an_unknown_cpu_with_close_matches():
    with pytest.raises(TargetError, match="unknown CPU 'haswel'.*did you mean 'haswell'"):
        Target.parse(X86, cpu="haswel")
    with pytest.raises(tg.TegradError, match="did you mean 'haswell'"):
        tg.export([tg.placeholder((2,), name="x")], [], "/tmp/never", target=X86, cpu="haswel")


@pytest.mark.parametrize("program", [matmul, mlp_gradient])
@pytest.mark.parametrize("options, widest", [({"target": ARM}, 128),
                                             ({"target": X86, "cpu": "haswell"}, 256)])
def test_export_vectors_are_the_targets(tmp_path, program, options, widest):
    inputs, outputs = program()
    result = tg.export(inputs, outputs, tmp_path / "k", llvm_ir=True, **options)
    assert result.target.target.vector_bits == widest
    got = widest_float_vector(result.ll_path.read_text())
    assert 0 < got <= widest


def test_host_build_still_equals_evaluate():
    inputs, outputs = matmul()
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    got = tg.build(inputs, outputs)(a, b)
    got = got[0] if isinstance(got, (list, tuple)) else got
    want = tg.evaluate(outputs, {inputs[0]: a, inputs[1]: b})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
