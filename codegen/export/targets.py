"""Code-generation targets: a normalised triple, a CPU and its features, a target machine.

LLVM is initialised for every target it was built with, so one process can emit objects
for the host and for other machines (aarch64, armv7, riscv64, wasm32, Windows x86-64).

>>> normalize_triple("aarch64-linux-gnu")
'aarch64-unknown-linux-gnu'
>>> spec = target_spec("aarch64-linux-gnu")
>>> (spec.cpu, spec.features, spec.is_host, spec.object_suffix, spec.library_suffix)
('generic', '+neon', False, '.o', '.so')
"""
from __future__ import annotations

import difflib
import functools
import re
import subprocess
import sys
from dataclasses import dataclass

import llvmlite.binding as llvm

from tegrad.codegen.export.errors import ExportError

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


@functools.cache
def initialize():
    """Initialise every LLVM target and assembly printer (once per process).

    llvmlite 0.50 raises on ``llvm.initialize()``; LLVM itself is initialised on import.
    """
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def normalize_triple(triple):
    """The full ``arch-vendor-os[-env]`` form of ``triple``; a short ``arch-os-env`` gets
    the ``unknown`` vendor, a bare architecture gets ``unknown-unknown``.

    >>> normalize_triple("riscv64-linux-gnu"), normalize_triple("wasm32")
    ('riscv64-unknown-linux-gnu', 'wasm32-unknown-unknown')
    """
    if not isinstance(triple, str) or not triple.strip():
        raise ExportError(f"target triple must be a non-empty string, got {triple!r}")
    parts = triple.strip().lower().split("-")
    if len(parts) == 1:
        parts += ["unknown", "unknown"]
    elif parts[1] in _KNOWN_OSES:
        parts.insert(1, "unknown")
    return "-".join(parts)


def host_triple():
    """The normalised triple of this process."""
    return normalize_triple(llvm.get_process_triple())


@dataclass(frozen=True)
class TargetSpec:
    """What code is generated for: ``triple`` (normalised), ``cpu``, ``features`` (LLVM's
    ``+a,-b`` form), ``abi`` (an ABI name, needed by hard-float RISC-V) and whether it is
    the machine running this process."""

    triple: str
    cpu: str
    features: str
    abi: str
    is_host: bool

    @property
    def arch(self):
        return self.triple.split("-")[0]

    @property
    def os(self):
        return self.triple.split("-")[2] if self.triple.count("-") >= 2 else "unknown"

    @property
    def object_format(self):
        return llvm.get_object_format(self.triple)

    @property
    def object_suffix(self):
        return ".obj" if self.object_format == "COFF" else ".o"

    @property
    def library_suffix(self):
        """The file suffix of a shared library on this target (``.so``, ``.dll``, ...)."""
        if self.object_format == "COFF" or self.os == "windows":
            return ".dll"
        if self.object_format == "MachO" or self.os in ("darwin", "macos", "ios"):
            return ".dylib"
        if self.object_format == "Wasm":
            return ".wasm"
        return ".so"

    @property
    def data_layout(self):
        """The target's data layout string."""
        machine = self.target_machine()  # kept alive while its TargetData view is read
        return str(machine.target_data)

    def target_machine(self, *, opt=3):
        """An LLVM target machine for this target: position-independent code (so the
        object links into a shared library), the default (small) code model."""
        initialize()
        try:
            target = llvm.Target.from_triple(self.triple)
        except RuntimeError as e:
            raise ExportError(f"LLVM has no backend for target {self.triple!r}: {e}") from None
        try:
            return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                                reloc="pic", codemodel="default",
                                                abiname=self.abi)
        except RuntimeError as e:
            raise ExportError(f"cannot create a target machine for {self.triple!r} "
                              f"(cpu {self.cpu!r}, features {self.features!r}): {e}") from None


def target_spec(target=None, *, cpu=None, features=None):
    """The :class:`TargetSpec` for ``target`` (a triple, short forms accepted; ``None`` is
    the host), ``cpu`` (``None``: the host CPU and its features for the host, a portable
    baseline for another machine; a CPU name: that CPU with its default features) and
    ``features`` (LLVM's ``"+a,-b"``, added to the CPU's: None adds none). A CPU or
    feature the target does not know raises :class:`ExportError` naming close matches
    (LLVM itself would ignore the name, or stop the process).

    >>> target_spec("x86_64-linux-gnu", cpu="haswel")
    Traceback (most recent call last):
    ...
    tegrad.codegen.export.errors.ExportError: unknown CPU 'haswel' for target x86_64-unknown-linux-gnu; did you mean 'haswell'?
    """
    initialize()
    host = host_triple()
    triple = host if target is None else normalize_triple(target)
    is_host = triple == host
    if cpu is None and features is None and is_host:
        return TargetSpec(triple, llvm.get_host_cpu_name(),
                          llvm.get_host_cpu_features().flatten(), _baseline(triple)[2], True)
    check_processor(triple, cpu, features)
    base_cpu, base_features, abi = _baseline(triple)
    if cpu is None and is_host:
        base_cpu, base_features = (llvm.get_host_cpu_name(),
                                   llvm.get_host_cpu_features().flatten())
    elif cpu is not None:
        base_cpu, base_features = cpu, ""
    if features:
        base_features = ",".join(f for f in (base_features, features.replace(" ", "")) if f)
    spec = TargetSpec(triple, base_cpu, base_features, abi, is_host)
    spec.target_machine()  # fail here, naming the target, if LLVM cannot generate code for it
    return spec


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
    """Raise :class:`ExportError` unless LLVM knows ``cpu`` (a name or None) and every
    ``+name`` / ``-name`` of ``features`` (a string or None) for ``triple``."""
    if cpu is not None and (not isinstance(cpu, str) or not cpu.strip()):
        raise ExportError(f"cpu must be a CPU name (a non-empty string), got {cpu!r}")
    if features is not None and not isinstance(features, str):
        raise ExportError(f"features must be a string like '+avx2,-fma', got {features!r}")
    items = [f.strip() for f in (features or "").split(",") if f.strip()]
    for item in items:
        if item[0] not in "+-" or len(item) == 1:
            raise ExportError(f"feature {item!r} for target {triple}: write '+name' to "
                              f"enable a feature or '-name' to disable it")
    known = processor_names(triple)
    if known is None:
        return
    cpus, names = known
    if cpu is not None and cpu not in cpus:
        raise ExportError(f"unknown CPU {cpu!r} for target {triple}{_close(cpu, cpus)}")
    for item in items:
        if item[1:] not in names:
            raise ExportError(f"unknown feature {item[1:]!r} (in {features!r}) for target "
                              f"{triple}{_close(item[1:], names)}")


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


def optimize(module, machine, *, level=3):
    """Run LLVM's default ``O<level>`` pipeline with loop and SLP vectorisation on the
    binding ``module`` in place, tuned for ``machine`` (its cost model picks vector widths)."""
    options = llvm.create_pipeline_tuning_options(speed_level=level)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)
