"""The IR: expressions, tensors and their stages, dtypes, errors, intrinsics, mappers, printer.

The lowest layer of tegrad: it imports nothing from the rest of the package.
"""
