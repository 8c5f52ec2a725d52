"""What export needs from the LLVM backend: a module holding a kernel function.

A *module factory* is a callable ``make_module(kernel, target) -> KernelModule``:

- ``kernel`` is a :class:`tegrad.codegen.loops.nodes.Kernel`;
- ``target`` is a :class:`tegrad.codegen.export.targets.TargetSpec` (``.triple``, ``.cpu``,
  ``.features``, ``.abi``, ``.data_layout``; ``.target_machine()`` gives its
  ``llvmlite.binding`` TargetMachine; ``.target`` is the compile pipeline's
  :class:`tegrad.codegen.target.Target`, the vector width the kernel was scheduled
  for), so the backend can make target-dependent choices.
  Export sets the module's triple and data layout itself and drops ``target-cpu`` and
  ``target-features`` function attributes, so code chosen for the host never reaches
  another target.

The module must define the kernel function with the backend's convention::

    i32 @kernel_function(ptr %buffers)

``buffers`` points to an array of buffer pointers: ``kernel.args`` in order (inputs then
outputs), followed by ``kernel.temps``, then ``KernelModule.extra``. It returns 0 on
success, otherwise a positive code listed in ``checks``: the failed ``Check`` node's error
kind (``"index_out_of_range"`` or ``"division_by_zero"``) and the tensor it names. The module may call only LLVM intrinsics
and functions of libc and libm (and the thread pool's entry point
``tegrad_parallel_for``, which export defines, if the kernel runs threads), so the exported
object depends on nothing else; it must not hold pointers to memory of this process
(addresses of Python objects, of buffers allocated by the JIT).

Export runs LLVM's O3 pipeline (:func:`tegrad.codegen.export.targets.optimize`) on the
module linked with the entry-point wrappers, so an unoptimised module is fine.

>>> from llvmlite import ir
>>> m = ir.Module()
>>> _ = ir.Function(m, ir.FunctionType(ir.IntType(32), [ir.PointerType()]), "k")
>>> KernelModule(m, "k", {1: ("index_out_of_range", "labels")}).alignment
64
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Union

from tegrad.codegen.export.abi import WORKSPACE_ALIGNMENT


@dataclass(frozen=True)
class KernelModule:
    """The backend's answer for one kernel and target.

    ``module``: an ``llvmlite.ir.Module`` (or its LLVM IR text) defining ``function``;
    ``function``: the kernel function's name; ``checks``: ``{code: (error kind, tensor)}`` or ``(error kind, tensor, message)``
    for every non-zero status the function can return; ``alignment``: the alignment in
    bytes the kernel function assumes of every buffer pointer (the exported entry point
    rejects pointers aligned less, with an error code, rather than run into a fault);
    ``extra``: buffers (:class:`~tegrad.codegen.loops.nodes.Buffer`) the function takes
    after ``kernel.temps`` in its pointer array, such as local buffers too large for the
    stack; the workspace holds them after the temporaries; ``threads``: the number of
    threads the kernel's parallel loops run on (above 1, the module calls
    ``tegrad_parallel_for``, declared only: export defines the pool once per library);
    ``workspace``: ``(offsets, nbytes)``, the byte offset in the workspace of each buffer
    after the arguments (``kernel.temps`` then ``extra``; buffers whose lifetimes are
    disjoint may share memory) and the workspace's size, or None: each buffer in a place
    of its own, one after another.
    """

    module: Union[object, str]
    function: str
    checks: Mapping[int, tuple] = field(default_factory=dict)
    alignment: int = WORKSPACE_ALIGNMENT
    extra: tuple = ()
    threads: int = 1
    workspace: tuple = None


#: ``make_module(kernel, target) -> KernelModule``
ModuleFactory = Callable[[object, object], KernelModule]
