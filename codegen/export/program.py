"""Export of tegrad programs: lowering to loop nests, then :func:`export_kernels`.

The two pieces come from the rest of ``tegrad.codegen``: ``lower(inputs, outputs, *,
name) -> Kernel`` (default: ``tegrad.codegen.lower.program.lower_program``) and the
backend's module factory (default: :func:`default_module_factory`, see
:mod:`tegrad.codegen.export.interface` for its contract). Both can be passed explicitly.
"""
from __future__ import annotations

import pathlib

from tegrad.codegen.export.abi import c_identifier
from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.export.interface import KernelModule
from tegrad.codegen.export.library import export_kernels
from tegrad.codegen.llvm.emit import emit_kernel
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.parallel import parallelize_stages


def default_lower():
    """``tegrad.codegen.lower.program.lower_program``."""
    return lower_program


def default_module_factory(*, threads=1, check_bounds=False):
    """The LLVM backend's module factory ``(kernel, target) -> KernelModule``: the one
    place where export meets the backend (``tegrad.codegen.llvm.emit.emit_kernel``, whose
    status code ``n`` is ``errors[n - 1]``, which passes its large local buffers after
    the temporaries as ``extra`` and which assumes only the natural alignment of each
    buffer); parallel loops run on ``threads`` threads (1: serially, no pool); with
    ``check_bounds`` every element access is checked (a failure returns its code)."""
    threads = _thread_count(threads)

    def make_module(kernel, target):
        emitted = emit_kernel(kernel, triple=target.triple, data_layout=target.data_layout,
                              threads=threads, check_bounds=bool(check_bounds))
        checks = {n + 1: tuple(error) for n, error in enumerate(emitted.errors)}
        return KernelModule(emitted.module, emitted.name, checks, alignment=1,
                            extra=tuple(emitted.extra), threads=threads)

    return make_module


def _thread_count(threads):
    """``threads`` checked: a positive int (an export's code is for another machine, so
    "every core" is not a default it can take).

    >>> _thread_count(0)
    Traceback (most recent call last):
    ...
    tegrad.codegen.export.errors.ExportError: threads must be a positive integer, got 0
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ExportError(f"threads must be a positive integer, got {threads!r}")
    return threads


def default_entry_name(path):
    """The entry point's name when none is given: the file name of ``path``.

    >>> default_entry_name("build/train-step")
    'train_step'
    """
    return c_identifier(pathlib.Path(path).name)


def export_program(exports, path, *, target=None, cpu=None, features=None, linker=None,
                   lower=None, make_module=None, threads=1, check_bounds=False):
    """Export several programs as one library: ``exports`` maps each entry point's name
    to ``(inputs, outputs)`` (lists of tensors: the placeholders in call order, and the
    results). ``threads``: how many threads the library's parallel loops run on (1, the
    default: none, the library starts no thread). ``check_bounds``: every element access
    checked at run time, a failure returning its error code (as ``tg.build``'s). Other
    options as :func:`export_kernels`; returns its result."""
    threads = _thread_count(threads)
    exports = dict(exports)
    if not exports:
        raise ExportError("nothing to export: no programs given")
    lower = lower or default_lower()
    kernels = {}
    for name, pair in exports.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ExportError(f"export {name!r}: expected a pair (inputs, outputs), got "
                              f"{type(pair).__name__}")
        inputs, outputs = pair
        kernels[name] = parallelize_stages(lower(list(inputs), outputs, name=name),
                                           threads=threads)
    factory = make_module or default_module_factory(threads=threads,
                                                    check_bounds=check_bounds)
    return export_kernels(kernels, path, make_module=factory, target=target, cpu=cpu,
                          features=features, linker=linker)


def export(inputs, outputs, path, *, target=None, cpu=None, features=None, name=None,
           linker=None, lower=None, make_module=None, threads=1, check_bounds=False):
    """Compile the program ``inputs -> outputs`` and write ``<path>.o``, ``<path>.h`` and
    (when a linker for the target is found) ``<path>.so``: one C entry point called
    ``name`` (default: the file name of ``path``), whose parallel loops run on ``threads``
    threads (default 1: none); with ``check_bounds``, every element access is checked at
    run time; see :func:`export_kernels` for ``target``, ``cpu`` and ``features``.

    >>> import tegrad as tg, tempfile, os
    >>> x = tg.placeholder((3,), name="x")
    >>> y = tg.compute((3,), lambda i: x[i] + 1, name="y")
    >>> r = tg.export([x], [y], os.path.join(tempfile.mkdtemp(), "plus_one"))
    >>> "int plus_one(const float *x, float *y, void *workspace);" in r.header_path.read_text()
    True
    """
    name = default_entry_name(path) if name is None else name
    return export_program({name: (inputs, outputs)}, path, target=target, cpu=cpu,
                          features=features, linker=linker, lower=lower,
                          make_module=make_module, threads=threads, check_bounds=check_bounds)


def export_kernel(kernel, path, *, target=None, cpu=None, features=None, name=None,
                  linker=None, make_module=None, threads=1, check_bounds=False):
    """Export an already lowered ``kernel`` (a built function's) as entry point ``name``
    (default: the kernel's name), its parallel loops on ``threads`` threads (default 1:
    none), every element access checked with ``check_bounds``."""
    threads = _thread_count(threads)
    name = kernel.name if name is None else name
    kernel = parallelize_stages(kernel, threads=threads)
    factory = make_module or default_module_factory(threads=threads, check_bounds=check_bounds)
    return export_kernels({name: kernel}, path, make_module=factory, target=target, cpu=cpu,
                          features=features, linker=linker)
