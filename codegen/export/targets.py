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

import contextlib
from dataclasses import dataclass

import llvmlite.binding as llvm

from tegrad.codegen import target as _target
from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.target import Target, TargetError
from tegrad.codegen.target.optimise import optimise
from tegrad.codegen.target import initialize, processor_names  # noqa: F401  (export's names)


@contextlib.contextmanager
def _export_errors():
    """A :class:`~tegrad.codegen.target.TargetError` raised inside becomes an
    :class:`ExportError` with the same message (what export's callers catch)."""
    try:
        yield
    except TargetError as e:
        raise ExportError(str(e)) from None


def normalize_triple(triple):
    """The full ``arch-vendor-os[-env]`` form of ``triple`` (see
    :func:`tegrad.codegen.target.normalize_triple`); raises :class:`ExportError`."""
    with _export_errors():
        return _target.normalize_triple(triple)


def check_processor(triple, cpu, features):
    """Raise :class:`ExportError` unless LLVM knows ``cpu`` and ``features`` for
    ``triple`` (see :func:`tegrad.codegen.target.check_processor`)."""
    with _export_errors():
        _target.check_processor(triple, cpu, features)


def host_triple():
    """The normalised triple of this process."""
    return _target.host_triple()


@dataclass(frozen=True)
class TargetSpec:
    """What code is generated for: ``triple`` (normalised), ``cpu``, ``features`` (LLVM's
    ``+a,-b`` form), ``abi`` (an ABI name, needed by hard-float RISC-V), whether it is
    the machine running this process, and the compile pipeline's ``target``
    (:class:`~tegrad.codegen.target.Target`: the vector width kernels are blocked for)."""

    triple: str
    cpu: str
    features: str
    abi: str
    is_host: bool
    target: Target

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
        with _export_errors():
            return self.target.target_machine(opt=opt, reloc="pic", codemodel="default")


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
    with _export_errors():  # Target.parse also checks that LLVM can generate code for it
        parsed = Target.parse(target, cpu, features)
    return TargetSpec(parsed.triple, parsed.cpu, parsed.features, parsed.abi,
                      parsed.triple == host_triple(), parsed)


def optimize(module, machine, *, level=3):
    """Run the optimisation pipeline (:func:`tegrad.codegen.target.optimise.optimise`)
    at ``O<level>`` on the binding ``module`` in place, tuned for ``machine`` (its cost
    model picks vector widths), LLVM's loop unroller on: a library is compiled once,
    ahead of time."""
    optimise(module, machine, unroll=True, speed_level=level)
