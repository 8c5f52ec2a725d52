"""LLVM code generation for loop-IR kernels: :func:`.emit.emit_kernel` makes the module,
:class:`tegrad.codegen.target.jit.LoadedModule` optimises and loads it for the host CPU."""
from tegrad.codegen.llvm.emit import KernelModule, emit_kernel
from tegrad.codegen.target.jit import LoadedModule, host_triple, target_machine

__all__ = ["KernelModule", "LoadedModule", "emit_kernel", "host_triple", "target_machine"]
