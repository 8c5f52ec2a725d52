"""One Target for the JIT and for exports: kernels are blocked and vectorised for the
target's vector registers, not the host's (an aarch64 export: 128-bit NEON vectors)."""
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tegrad as tg
from tegrad.codegen.target import Target, TargetError, host_triple
from tegrad.codegen.tuning import WIDE_VECTORS

from support.programs import matmul, mlp_gradient  # a 64x64 float32 matmul; an MLP's gradient
from support.llvm_text import FORCED_BUT_SCALAR

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


@pytest.mark.parametrize("triple, cpu, wide", [
    (None, "skylake-avx512", True), (X86, "znver4", True), (X86, "haswell", False),
    (ARM, None, False)])
def test_a_named_avx512_target_prefers_512_bit_vectors_like_the_host(triple, cpu, wide):
    # the host rule: -prefer-256-bit on an AVX-512 CPU with WIDE_VECTORS
    t = Target.parse(triple if triple else host_triple(), cpu=cpu)
    assert t.vector_bits == (512 if wide else 256 if cpu else 128)
    assert ("-prefer-256-bit" in t.features.split(",")) == (wide and WIDE_VECTORS)
    host = Target.host()
    assert ("-prefer-256-bit" in host.features.split(",")) == (
        host.vector_bits == 512 and WIDE_VECTORS)


@settings(max_examples=3, deadline=None)
@given(n=st.integers(1, 64).map(lambda k: 64 * k),
       cpu=st.sampled_from(["skylake-avx512", "znver4"]))
def test_an_avx512_export_holds_512_bit_float_vectors(tmp_path_factory, n, cpu):
    # (lengths of whole 64s: for 120 elements LLVM's cost model picks 8 lanes on
    # skylake-avx512, a choice of its own, not a fact of the target)
    x = tg.placeholder((n,), name="x")
    y = tg.compute((n,), lambda i: x[i] * 3.0 + 1.0, name="y")
    result = tg.export([x], [y], tmp_path_factory.mktemp("k") / "k", llvm_ir=True,
                       target=X86, cpu=cpu)
    text = result.ll_path.read_text()
    assert result.target.target.vector_bits == 512
    assert ("<16 x float>" in text) == WIDE_VECTORS
    assert 0 < widest_float_vector(text) <= 512

@pytest.mark.parametrize("unroll", [False, True])
def test_llvm_notes_on_declined_vectorization_do_not_reach_stderr(capfd, unroll):
    """A loop forced to vectorise whose body cannot (an opaque call) makes LLVM print a
    remark and a warning on stderr; the optimiser keeps them from the user (the marks
    are checked in the optimised IR instead) and the loop stays scalar."""
    import llvmlite.binding as llvm
    from tegrad.codegen.target.optimise import optimise
    module = llvm.parse_assembly(FORCED_BUT_SCALAR)
    optimise(module, Target.host().target_machine(), unroll=unroll)
    assert "isvectorized" not in str(module)
    err = capfd.readouterr().err
    assert "loop not vectorized" not in err, err


def test_other_text_on_stderr_passes_through_the_optimiser(capfd):
    from tegrad.codegen.target.optimise import _declined_vectorization_dropped
    with _declined_vectorization_dropped():
        os.write(2, b"warning: <unknown>:0:0: loop not vectorized: call instruction\n")
        os.write(2, b"something else LLVM said\n")
    assert capfd.readouterr().err == "something else LLVM said\n"
