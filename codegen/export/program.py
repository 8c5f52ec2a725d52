"""Export of tegrad programs: compiling to loop nests, then :func:`export_kernels`.

The two pieces come from the rest of ``tegrad.codegen``: the compile pipeline
(:func:`tegrad.codegen.pipeline.compile_kernel`, the passes ``tg.build`` runs, so the
library runs the code a built function runs; a ``lower(inputs, outputs, *, name) ->
Kernel`` given instead replaces all but its ``parallelize`` pass) and the backend's
module factory (default: :func:`default_module_factory`, see
:mod:`tegrad.codegen.export.interface` for its contract). Both can be passed explicitly.
"""
from __future__ import annotations

import pathlib

from tegrad.codegen.export.abi import c_identifier
from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.export.interface import KernelModule
from tegrad.codegen.export.library import export_kernels
from tegrad.codegen.export.targets import target_spec
from tegrad.codegen.llvm.emit import emit_kernel
from tegrad.codegen.pipeline import check_schedule, compile_kernel
from tegrad.codegen.schedule.parallel import parallelize_stages


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
                              threads=threads, check_bounds=bool(check_bounds),
                              target=target.target)
        checks = {n + 1: tuple(error) for n, error in enumerate(emitted.errors)}
        plan = emitted.storage
        owned = emitted.buffers[len(kernel.args):]
        return KernelModule(emitted.module, emitted.name, checks, alignment=1,
                            extra=tuple(emitted.extra), threads=threads,
                            workspace=(tuple(plan.offsets[b] for b in owned), plan.nbytes))

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


def program_kernel(inputs, outputs, *, name, threads, schedule=None, lower=None,
                   target=None):
    """The kernel an export of ``inputs -> outputs`` runs: ``tg.build``'s
    (:func:`~tegrad.codegen.pipeline.compile_kernel`, parallel loops for ``threads``,
    vectorised for ``target``, a :class:`~tegrad.codegen.target.Target`, None: the
    host), or with a ``lower`` hook its kernel, parallelized.

    >>> import tegrad as tg
    >>> x = tg.placeholder((3,), name="x")
    >>> program_kernel([x], [x * 2.0], name="twice", threads=1).name
    'twice'
    """
    if lower is None:
        return compile_kernel(list(inputs), outputs, threads=threads, schedule=schedule,
                              name=name, target=target).kernel
    if schedule is not None:
        raise ExportError(f"export {name!r}: schedule= applies to tegrad's own compile "
                          f"pipeline, not to a custom lower=")
    return parallelize_stages(lower(list(inputs), outputs, name=name), threads=threads)


def export_program(exports, path, *, target=None, cpu=None, features=None, linker=None,
                   lower=None, make_module=None, threads=1, check_bounds=False,
                   schedule=None, llvm_ir=False):
    """Export several programs as one library: ``exports`` maps each entry point's name
    to ``(inputs, outputs)`` (lists of tensors: the placeholders in call order, and the
    results). ``threads``: how many threads the library's parallel loops run on (1, the
    default: none, the library starts no thread). ``check_bounds``: every element access
    checked at run time, a failure returning its error code (as ``tg.build``'s).
    ``schedule``: as ``tg.build``'s, for every program (None: the automatic schedule).
    Other options as :func:`export_kernels`; returns its result."""
    threads = _thread_count(threads)
    schedule = check_schedule(schedule, "export")
    exports = dict(exports)
    if not exports:
        raise ExportError("nothing to export: no programs given")
    spec = target_spec(target, cpu=cpu, features=features)  # the kernels are for its machine
    kernels = {}
    for name, pair in exports.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ExportError(f"export {name!r}: expected a pair (inputs, outputs), got "
                              f"{type(pair).__name__}")
        inputs, outputs = pair
        kernels[name] = program_kernel(inputs, outputs, name=name, threads=threads,
                                       schedule=schedule, lower=lower, target=spec.target)
    return _write(kernels, path, make_module, threads, check_bounds, target=target, cpu=cpu,
                  features=features, linker=linker, llvm_ir=llvm_ir)


def export(inputs, outputs, path, *, target=None, cpu=None, features=None, name=None,
           linker=None, lower=None, make_module=None, threads=1, check_bounds=False,
           schedule=None, llvm_ir=False):
    """Compile the program ``inputs -> outputs`` and write ``<path>.o``, ``<path>.h`` and
    (when a linker for the target is found) ``<path>.so``: one C entry point called
    ``name`` (default: the file name of ``path``), whose parallel loops run on ``threads``
    threads (default 1: none); with ``check_bounds``, every element access is checked at
    run time; ``schedule`` as ``tg.build``'s (None: automatic; the library runs the
    kernel ``tg.build`` would, see ``result.kernels``); with ``llvm_ir``, the optimised
    LLVM module is written as ``<path>.ll`` too; see :func:`export_kernels` for
    ``target``, ``cpu`` and ``features``.

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
                          make_module=make_module, threads=threads, check_bounds=check_bounds,
                          schedule=schedule, llvm_ir=llvm_ir)


def export_built(inputs, outputs, path, *, kernel_name, schedule=None, name=None,
                 target=None, cpu=None, features=None, linker=None, make_module=None,
                 threads=1, check_bounds=False, llvm_ir=False):
    """Export a built function's program (``f.export``): compiled again by the pipeline
    for ``threads`` threads (never with the build's parallel loops, made for its own
    thread count), the kernel named ``kernel_name`` as the function's, the entry point
    ``name`` (default ``kernel_name``); other options as :func:`export`'s."""
    threads = _thread_count(threads)
    spec = target_spec(target, cpu=cpu, features=features)
    kernel = program_kernel(inputs, outputs, name=kernel_name, threads=threads,
                            schedule=schedule, target=spec.target)
    return _write({kernel_name if name is None else name: kernel}, path, make_module,
                  threads, check_bounds, target=target, cpu=cpu, features=features,
                  linker=linker, llvm_ir=llvm_ir)


def export_kernel(kernel, path, *, target=None, cpu=None, features=None, name=None,
                  linker=None, make_module=None, threads=1, check_bounds=False,
                  llvm_ir=False):
    """Export an already lowered ``kernel`` as entry point ``name`` (default: the
    kernel's name), its parallel loops on ``threads`` threads (default 1: none), every
    element access checked with ``check_bounds``."""
    threads = _thread_count(threads)
    name = kernel.name if name is None else name
    kernel = parallelize_stages(kernel, threads=threads)
    return _write({name: kernel}, path, make_module, threads, check_bounds, target=target,
                  cpu=cpu, features=features, linker=linker, llvm_ir=llvm_ir)


def _write(kernels, path, make_module, threads, check_bounds, **options):
    """:func:`export_kernels` of ``kernels`` through ``make_module`` (default: the LLVM
    backend's, for ``threads`` threads and ``check_bounds``)."""
    factory = make_module or default_module_factory(threads=threads, check_bounds=check_bounds)
    return export_kernels(kernels, path, make_module=factory, **options)
