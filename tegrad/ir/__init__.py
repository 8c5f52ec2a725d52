"""The IR: expressions, tensors and their stages, dtypes, errors, intrinsics, mappers, printer.

The lowest layer of tegrad above the solver: it imports nothing from the rest of the
package. Importing it installs the printer as the ``str()`` of expressions and tensors.
"""
from tegrad.ir import printer  # noqa: F401  (str() of expressions and tensors)
