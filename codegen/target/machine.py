"""What code is generated for: one :class:`Target` (triple, CPU, features, vector width).

The host (``tg.build``'s JIT) and an export's machine (``tg.export(target=..., cpu=...)``)
are both a :class:`Target`; the compile pipeline blocks and vectorises a kernel for the
target's vector registers (the gemm's register block, the vector accumulators' lanes),
and LLVM's target machine is made from the same triple, CPU and features.

>>> Target.parse("aarch64-linux-gnu").vector_bits
128
>>> Target.host() == Target.host() and Target.host().vector_bits in (128, 256, 512)
True
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import subprocess
import sys
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np

from tegrad.ir.errors import TegradError

from tegrad.codegen.tuning import WIDE_VECTORS
from tegrad.codegen.target.llvm_setup import initialize


class TargetError(TegradError):
    """A target LLVM cannot generate code for: an unknown triple, CPU or feature."""


# where users import it from (tracebacks name it so)
TargetError.__module__ = "tegrad.codegen.target"


#: operating systems that may stand second in a short triple (``arch-os-env``)
_KNOWN_OSES = ("linux", "windows", "darwin", "macos", "ios", "freebsd", "netbsd", "openbsd",
               "android", "none", "wasi", "emscripten", "fuchsia")

#: a portable baseline for a foreign architecture: (cpu, features, abi name).
#: aarch64's baseline includes NEON (Advanced SIMD is mandatory in ARMv8-A); armv7 hard-float
#: Linux distributions assume VFPv3-D16; riscv64 Linux distributions assume RV64GC with the
#: LP64D ABI.
_BASELINES = {
    "aarch64": ("generic", "+neon", ""),
    "arm64": ("generic", "+neon", ""),
    "armv7": ("generic", "+vfp3d16", ""),
    "riscv64": ("generic-rv64", "+m,+a,+f,+d,+c", "lp64d"),
    "riscv32": ("generic-rv32", "+m,+a,+f,+d,+c", "ilp32d"),
    "x86_64": ("x86-64", "", ""),
    "i686": ("i686", "", ""),
}


def normalize_triple(triple):
    """The full ``arch-vendor-os[-env]`` form of ``triple``; a short ``arch-os-env`` gets
    the ``unknown`` vendor, a bare architecture gets ``unknown-unknown``.

    >>> normalize_triple("riscv64-linux-gnu"), normalize_triple("wasm32")
    ('riscv64-unknown-linux-gnu', 'wasm32-unknown-unknown')
    """
    if not isinstance(triple, str) or not triple.strip():
        raise TargetError(f"target triple must be a non-empty string, got {triple!r}")
    parts = triple.strip().lower().split("-")
    if len(parts) == 1:
        parts += ["unknown", "unknown"]
    elif parts[1] in _KNOWN_OSES:
        parts.insert(1, "unknown")
    return "-".join(parts)


def host_triple():
    """The normalised triple of this process."""
    return normalize_triple(llvm.get_process_triple())


def _registers(triple, vector_bits):
    """How many vector registers of the widest kind the architecture of ``triple`` has
    (x86-64: 32 with AVX-512, else 16; 32-bit x86: 8; aarch64 and RISC-V: 32)."""
    arch = triple.split("-")[0]
    if arch == "x86_64":
        return 32 if vector_bits >= 512 else 16
    if re.fullmatch(r"i[3-6]86", arch):
        return 8
    if arch.startswith(("aarch64", "arm64", "riscv")):
        return 32
    return 16


def _feature_bits(features):
    """The widest float vector in bits of a complete feature string, as llvmlite reads
    the host's (AVX-512: 512, AVX: 256, else 128: SSE, NEON).

    >>> _feature_bits("+sse2,+avx,+avx2,-avx512f")
    256
    """
    flags = features.split(",")
    if "+avx512f" in flags:
        return 512
    if "+avx" in flags or "+avx2" in flags:
        return 256
    return 128


@dataclass(frozen=True)
class Target:
    """A machine to generate code for: LLVM's ``triple``, ``cpu`` and ``features``
    (``"+a,-b"``), the ``abi`` name (hard-float RISC-V needs one), and what blocking
    and vectorising need: ``vector_bits``, the width of its widest float vector
    registers, and ``vector_registers``, how many it has. Hashable: kernels and
    blockings are cached per target.

    >>> t = Target.parse("x86_64-linux-gnu", cpu="haswell")
    >>> (t.vector_bits, t.vector_registers, t.lanes("float64"))
    (256, 16, 4)
    """

    triple: str
    cpu: str
    features: str
    vector_bits: int
    vector_registers: int
    abi: str = ""

    @staticmethod
    def host():
        """The machine running this process (llvmlite reads its CPU and features).

        >>> Target.host() is Target.host()
        True
        """
        return _host()

    @staticmethod
    def parse(triple=None, cpu=None, features=None):
        """The target ``triple`` (short forms accepted; None: the host's), ``cpu``
        (None: the host CPU and its features for the host, a portable baseline for
        another machine; a name: that CPU with its default features) and ``features``
        (LLVM's ``"+a,-b"``, added to the CPU's). An unknown CPU or feature raises
        :class:`TargetError` naming close matches (LLVM itself would ignore the name, or
        stop the process).

        >>> Target.parse("x86_64-linux-gnu", cpu="skylake-avx512").vector_bits
        512
        >>> Target.parse("x86_64-linux-gnu", cpu="haswel")
        Traceback (most recent call last):
        ...
        tegrad.codegen.target.TargetError: unknown CPU 'haswel' for target x86_64-unknown-linux-gnu; did you mean 'haswell'?
        """
        # checked before the cache, which needs hashable names
        triple = host_triple() if triple is None else normalize_triple(triple)
        _check_kinds(cpu, features)
        return _parse(triple, cpu, features)

    @functools.cached_property
    def data_layout(self):
        """LLVM's data layout string for this target."""
        machine = self.target_machine()  # kept alive while its TargetData view is read
        return str(machine.target_data)

    def lanes(self, dtype):
        """Lanes of ``dtype`` elements in one of the widest vector registers.

        >>> Target.parse("aarch64-linux-gnu").lanes("float32")
        4
        """
        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    def with_vector_bits(self, vector_bits):
        """This target with vector registers of ``vector_bits`` (as many as its
        architecture has of that width): for tuning experiments.

        >>> Target.parse("x86_64-linux-gnu").with_vector_bits(512).vector_registers
        32
        """
        return dataclasses.replace(self, vector_bits=vector_bits,
                                   vector_registers=_registers(self.triple, vector_bits))

    def target_machine(self, *, opt=3, reloc="default", codemodel="jitdefault", jit=False):
        """A new LLVM target machine for this target (an execution engine takes
        ownership of its own)."""
        initialize()
        try:
            target = llvm.Target.from_triple(self.triple)
        except RuntimeError as e:
            raise TargetError(f"LLVM has no backend for target {self.triple!r}: {e}") from None
        try:
            return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                                reloc=reloc, codemodel=codemodel,
                                                abiname=self.abi, jit=jit)
        except RuntimeError as e:
            raise TargetError(f"cannot create a target machine for {self.triple!r} "
                              f"(cpu {self.cpu!r}, features {self.features!r}): {e}") from None


def resolve(target=None, vector_bits=None):
    """``target`` (None: the host), with ``vector_bits`` wide registers when given: what
    the blocking functions take.

    >>> resolve(vector_bits=512).vector_bits
    512
    """
    target = Target.host() if target is None else target
    return target if vector_bits is None else target.with_vector_bits(vector_bits)


def wide_vector_features(triple, features, vector_bits):
    """``features`` for a target of ``triple`` whose widest vectors are ``vector_bits``
    wide, with ``-prefer-256-bit`` added on an AVX-512 (512-bit x86) target with
    :data:`WIDE_VECTORS`, so that LLVM's vectoriser uses the 512-bit registers (it
    prefers 256-bit ones on such CPUs otherwise); features that name ``prefer-256-bit``
    already are kept. The one rule for the host and for a named target.

    >>> wide_vector_features("x86_64-unknown-linux-gnu", "+avx512f", 512)
    '+avx512f,-prefer-256-bit'
    >>> wide_vector_features("x86_64-unknown-linux-gnu", "", 256)
    ''
    """
    arch = triple.split("-")[0]
    if (not WIDE_VECTORS or vector_bits < 512 or "prefer-256-bit" in features
            or not (arch == "x86_64" or re.fullmatch(r"i[3-6]86", arch))):
        return features
    return ",".join(f for f in (features, "-prefer-256-bit") if f)


def host_features():
    """The host CPU's features as LLVM's feature string (with
    :func:`wide_vector_features`'s rule)."""
    initialize()
    features = llvm.get_host_cpu_features().flatten()
    return wide_vector_features(llvm.get_process_triple(), features, _feature_bits(features))


@functools.cache
def _host():
    features, triple = host_features(), llvm.get_process_triple()
    bits = _feature_bits(features)
    return Target(triple, llvm.get_host_cpu_name(), features, bits, _registers(triple, bits),
                  _baseline(normalize_triple(triple))[2])


@functools.lru_cache(maxsize=64)
def _parse(triple, cpu, features):
    initialize()
    is_host = triple == host_triple()
    base_cpu, base_features, abi = _baseline(triple)
    if cpu is None and features is None and is_host:
        # the host's own features as LLVM reads them
        features = llvm.get_host_cpu_features().flatten()
        return _target(triple, llvm.get_host_cpu_name(), features, abi, _feature_bits(features))
    check_processor(triple, cpu, features)
    if cpu is None and is_host:
        base_cpu, base_features = (llvm.get_host_cpu_name(),
                                   llvm.get_host_cpu_features().flatten())
    elif cpu is not None:
        base_cpu, base_features = cpu, ""
    if features:
        base_features = ",".join(f for f in (base_features, features.replace(" ", "")) if f)
    return _target(triple, base_cpu, base_features, abi)


def _target(triple, cpu, features, abi, bits=None):
    """The :class:`Target`, its vector width measured unless given (which also checks that
    LLVM can make a target machine for it), its features with
    :func:`wide_vector_features`'s rule."""
    if bits is None:
        bits = _measured_bits(triple, cpu, features, abi)
    else:
        Target(triple, cpu, features, bits, 0, abi).target_machine()
    return Target(triple, cpu, wide_vector_features(triple, features, bits), bits,
                  _registers(triple, bits), abi)


#: a sum of two vectors of 16 float32 (512 bits), which the code generator splits into as
#: many instructions as it takes registers of the target's widest float vectors
_PROBE = """
define void @probe(ptr %a, ptr %b) {
  %x = load <16 x float>, ptr %a
  %y = load <16 x float>, ptr %b
  %z = fmul <16 x float> %x, %y
  store <16 x float> %z, ptr %a
  ret void
}
"""


def _measured_bits(triple, cpu, features, abi):
    """The widest float vector (128 to 512 bits) of the CPU and features: the features a
    named CPU implies are LLVM's alone (llvmlite reads only the host's), so the width is
    measured, by how many multiplies a 512-bit one becomes in the target's assembly."""
    machine = Target(triple, cpu, features, 0, 0, abi).target_machine(opt=2)
    module = llvm.parse_assembly(_PROBE)
    module.triple, module.data_layout = triple, str(machine.target_data)
    mnemonics = [line.split()[0] for line in machine.emit_assembly(module).splitlines()
                 if line[:1] in ("\t", " ") and line.strip()
                 and not line.strip().startswith((".", "#", "//", ";", "@"))]
    multiplies = max(1, sum("mul" in m.lower() for m in mnemonics))
    bits = 128
    while bits < 512 and multiplies * 2 * bits <= 512:
        bits *= 2
    return bits


#: a line of LLVM's CPU and feature listing: two spaces, the name, spaces, ``-``
_LISTED = re.compile(r"^  (\S+)\s+- ", re.MULTILINE)

#: run in a child process: LLVM prints the listing while it makes a target machine for
#: the CPU "help" (to standard error, where this process could not read it)
_LISTING = """import sys, llvmlite.binding as llvm
llvm.initialize_all_targets()
llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu="help")
"""


@functools.cache
def processor_names(triple):
    """``(cpus, features)``: the names LLVM knows for ``triple`` (its ``-mcpu=help``
    listing, read once per target and process in a child process, about 0.3 s); None
    when the listing cannot be read (then names are not checked)."""
    try:
        done = subprocess.run([sys.executable, "-c", _LISTING, triple], capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stderr
    start, middle = (text.find("Available CPUs for this target:"),
                     text.find("Available features for this target:"))
    if start < 0 or middle < start:
        return None
    cpus = frozenset(_LISTED.findall(text[start:middle]))
    features = frozenset(_LISTED.findall(text[middle:]))
    return (cpus, features) if cpus else None


def check_processor(triple, cpu, features):
    """Raise :class:`TargetError` unless LLVM knows ``cpu`` (a name or None) and every
    ``+name`` / ``-name`` of ``features`` (a string or None) for ``triple``."""
    _check_kinds(cpu, features)
    items = [f.strip() for f in (features or "").split(",") if f.strip()]
    for item in items:
        if item[0] not in "+-" or len(item) == 1:
            raise TargetError(f"feature {item!r} for target {triple}: write '+name' to "
                              f"enable a feature or '-name' to disable it")
    known = processor_names(triple)
    if known is None:
        return
    cpus, names = known
    if cpu is not None and cpu not in cpus:
        raise TargetError(f"unknown CPU {cpu!r} for target {triple}{_close(cpu, cpus)}")
    for item in items:
        if item[1:] not in names:
            raise TargetError(f"unknown feature {item[1:]!r} (in {features!r}) for target "
                              f"{triple}{_close(item[1:], names)}")


def _check_kinds(cpu, features):
    """Raise :class:`TargetError` unless ``cpu`` is None or a name and ``features`` None
    or a string."""
    if cpu is not None and (not isinstance(cpu, str) or not cpu.strip()):
        raise TargetError(f"cpu must be a CPU name (a non-empty string), got {cpu!r}")
    if features is not None and not isinstance(features, str):
        raise TargetError(f"features must be a string like '+avx2,-fma', got {features!r}")


def _close(name, known):
    """``; did you mean ...?`` with the known names closest to ``name``, or nothing."""
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def _baseline(triple):
    arch = triple.split("-")[0]
    for prefix, baseline in _BASELINES.items():
        if arch.startswith(prefix):
            return baseline
    return ("generic", "", "")


__all__ = ["Target", "TargetError", "check_processor", "host_features", "host_triple",
           "normalize_triple", "processor_names", "resolve", "wide_vector_features"]
