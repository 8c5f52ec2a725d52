"""The error raised when a program cannot be exported."""
from tegrad.ir.errors import TegradError


class ExportError(TegradError):
    """Export failed: an unknown target, a name that is not a C identifier, a module
    without the kernel function, or an object file that cannot be written."""
