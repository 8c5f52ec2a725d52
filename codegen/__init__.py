"""Lowering of tegrad programs to loop nests and native code (LLVM through llvmlite)."""
