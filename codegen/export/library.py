"""Writing an exported library: ``<path>.o``, ``<path>.h`` and the shared library.

Every kernel becomes one C entry point (see :mod:`tegrad.codegen.export.abi`). The kernel
modules come from a module factory (see :mod:`tegrad.codegen.export.interface`); each is
linked with its wrapper, its definitions renamed ``ENTRY.NAME`` and made internal (so two
kernels never clash and only the entry points are exported), all are linked into one
module, optimised at O3 for the target machine and emitted as one object file. When a
kernel runs parallel loops, the library gets one native thread pool
(:func:`tegrad.codegen.runtime.thread_pool.emit_thread_pool`), internal like the kernels,
which every entry point shares.
"""
from __future__ import annotations

import os
import pathlib
import re
import types
from dataclasses import dataclass, field
from typing import Mapping, Optional

import llvmlite.binding as llvm
import llvmlite.ir as llvm_ir

from tegrad.codegen.kernels.fork_join import PARALLEL_FOR
from tegrad.codegen.runtime.thread_pool import emit_thread_pool
from tegrad.codegen.export.abi import check_entry_name, entry_point
from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.export.header import header_text
from tegrad.codegen.export.interface import KernelModule
from tegrad.codegen.export.link import link_shared_library
from tegrad.codegen.export.targets import optimize, target_spec
from tegrad.codegen.export.wrapper import wrapper_module

#: function attributes that would pin a function to the CPU the backend saw (the host)
_TARGET_ATTRIBUTES = re.compile(r'\s*"target-(cpu|features)"="[^"]*"')
#: an attribute group left empty by their removal, which LLVM's parser rejects
_EMPTY_GROUP = re.compile(r"^(attributes #\d+ = \{)\s*\}", re.MULTILINE)


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_kernels` wrote: paths of the object, header and shared library
    (None when no linker was found), the target, the entry points, the symbols the object
    needs from outside (libc and libm functions), a message about the link, the
    kernels exported (``{entry name: Kernel}``, read-only) and the path of the LLVM
    module's text (None unless asked for with ``llvm_ir``)."""

    object_path: pathlib.Path
    header_path: pathlib.Path
    library_path: Optional[pathlib.Path]
    target: object
    entries: tuple
    undefined: tuple
    message: str
    kernels: Mapping = field(default_factory=lambda: types.MappingProxyType({}))
    ll_path: Optional[pathlib.Path] = None


def export_kernels(kernels, path, *, make_module, target=None, cpu=None, features=None,
                   linker=None, llvm_ir=False):
    """Export ``kernels`` (``{entry name: Kernel}``) as native code for ``target``.

    ``make_module(kernel, target_spec) -> KernelModule`` gives each kernel's LLVM module
    (the backend); ``target`` is a triple (short forms like ``aarch64-linux-gnu``
    accepted; None: this machine); ``cpu`` a CPU name (None: the host's for the host, a
    portable baseline otherwise); ``features`` LLVM's ``"+a,-b"`` added to the CPU's (an
    unknown CPU or feature raises :class:`ExportError` naming close matches, see
    :func:`~tegrad.codegen.export.targets.target_spec`); ``linker`` a C compiler driver (None: ``cc`` for the
    host, ``<triple>-gcc`` otherwise). Writes ``<path>.o`` (``.obj`` for COFF),
    ``<path>.h`` and, when a linker is found, ``<path>.so`` (``.dll``, ``.dylib``); with
    ``llvm_ir``, also ``<path>.ll``: the text of the optimised module the object holds.

    >>> export_kernels({}, "/tmp/nothing", make_module=None)
    Traceback (most recent call last):
    ...
    tegrad.codegen.export.errors.ExportError: nothing to export: no kernels given
    """
    kernels = dict(kernels)
    if not kernels:
        raise ExportError("nothing to export: no kernels given")
    for name in kernels:
        check_entry_name(name)
    spec = target_spec(target, cpu=cpu, features=features)
    machine = spec.target_machine()
    data_layout = str(machine.target_data)
    exported = set(kernels) | {f"{name}_error_string" for name in kernels}
    if len(exported) != 2 * len(kernels):
        raise ExportError(f"entry point names {sorted(kernels)} clash with each other's "
                          f"NAME_error_string functions")
    combined, entries = None, []
    for name, kernel in kernels.items():
        built = make_module(kernel, spec)
        if not isinstance(built, KernelModule):
            raise ExportError(f"the module factory returned {type(built).__name__} for "
                              f"kernel {kernel.name!r}; a KernelModule is needed")
        entry = entry_point(name, kernel, built.checks, alignment=built.alignment,
                            extra=built.extra, threads=built.threads,
                            workspace=built.workspace)
        module = _entry_module(entry, built, spec.triple, data_layout, exported)
        if combined is None:
            combined = module
        else:
            try:
                combined.link_in(module)
            except RuntimeError as e:
                raise ExportError(f"the modules of kernels {sorted(kernels)} do not link "
                                  f"together: {e}") from None
        entries.append(entry)
    _link_thread_pool(combined, spec.triple, data_layout)
    combined.verify()
    optimize(combined, machine)
    # after optimisation: a gemm kernel declares the thread pool, which one thread never
    # calls (the optimiser drops it, and the pthread functions with it)
    undefined = tuple(sorted(f.name for f in combined.functions
                             if f.is_declaration and not f.name.startswith("llvm.")))
    object_bytes = machine.emit_object(combined)

    path = pathlib.Path(os.fspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    object_path = path.with_name(path.name + spec.object_suffix)
    header_path = path.with_name(path.name + ".h")
    library_path = path.with_name(path.name + spec.library_suffix)
    object_path.write_bytes(object_bytes)
    if library_path.exists():  # never leave a library of an earlier export beside the new object
        library_path.unlink()
    described = f"{spec.triple} (cpu {spec.cpu}{', ' + spec.features if spec.features else ''})"
    if len(described) > 160:  # the host's full feature list is long and says little
        described = f"{spec.triple} (cpu {spec.cpu})"
    header_path.write_text(header_text(path.name, entries, described))
    ll_path = None
    if llvm_ir:
        ll_path = path.with_name(path.name + ".ll")
        ll_path.write_text(str(combined))
    library, message = link_shared_library(spec, object_path, library_path, undefined,
                                           linker=linker)
    return ExportResult(object_path, header_path, library, spec, tuple(entries), undefined,
                        message, types.MappingProxyType(kernels), ll_path)


def _entry_module(entry, built, triple, data_layout, exported):
    """The kernel module with its wrapper linked in; only the entry points stay external."""
    text = _TARGET_ATTRIBUTES.sub("", str(built.module))
    text = _EMPTY_GROUP.sub(r"\1 nounwind }", text)  # true of code called from C
    module = _parse(text, f"the module of kernel {entry.kernel_name!r}")
    clash = exported & {f.name for f in module.functions if f.is_declaration}
    if clash:
        raise ExportError(f"entry point name(s) {sorted(clash)} clash with functions the "
                          f"code of kernel {entry.kernel_name!r} calls; choose another name")
    module.triple = triple
    module.data_layout = data_layout
    try:
        function = module.get_function(built.function)
    except NameError:
        function = None
    if function is None or function.is_declaration:
        raise ExportError(f"the module of kernel {entry.kernel_name!r} does not define "
                          f"its kernel function {built.function!r}")
    defined = [value for value in list(module.functions) + list(module.global_variables)
               if not value.is_declaration and not value.name.startswith("llvm.")]
    for value in defined:
        value.name = f"{entry.name}.{value.name}"
    wrapper = _parse(str(wrapper_module(entry, function.name, triple, data_layout)),
                     f"the entry point of {entry.name!r}")
    module.link_in(wrapper)
    for value in defined:  # internal only now: the wrapper had to link against them
        value.linkage = "internal"
    return module


def _link_thread_pool(module, triple, data_layout):
    """Define the pool in ``module`` if its kernels call it (internal: each library has
    its own, and exports no symbol of it)."""
    try:
        declared = module.get_function(PARALLEL_FOR)
    except NameError:
        return
    if not declared.is_declaration:
        return
    pool = llvm_ir.Module(name="tegrad_thread_pool")
    pool.triple, pool.data_layout = triple, data_layout
    emit_thread_pool(pool, triple=triple)
    parsed = _parse(str(pool), "the thread pool")
    names = [f.name for f in parsed.functions if not f.is_declaration]
    module.link_in(parsed)
    for name in names:
        module.get_function(name).linkage = "internal"


def _parse(text, what):
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as e:
        raise ExportError(f"{what} is not valid LLVM IR: {e}") from None
    return module
