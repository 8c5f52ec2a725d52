"""Export of compiled kernels as native libraries for this or another machine.

:func:`export_kernels` writes an object file, a C header and (when a linker for the
target is found) a shared library; the code inside depends only on libc and libm (and
libpthread when its parallel loops run on threads, see ``threads=``). The
LLVM module of each kernel comes from a module factory (:mod:`.interface`);
:mod:`.program` exports tegrad programs, :mod:`.cli` is the ``export`` command.
"""
from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.export.interface import KernelModule, ModuleFactory
from tegrad.codegen.export.library import ExportResult, export_kernels
from tegrad.codegen.export.targets import TargetSpec, normalize_triple, target_spec

__all__ = ["ExportError", "ExportResult", "KernelModule", "ModuleFactory", "TargetSpec",
           "export_kernels", "normalize_triple", "target_spec"]
