"""The dtypes tegrad knows and the rules that combine them.

>>> promote_python_scalar(2, "float32")
'float32'
"""
import numbers

import numpy as np

from tegrad.ir.errors import DTypeError

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

#: the dtype of index variables (compute axes and reduce axes)
INDEX_DTYPE = "int32"


def canonical_dtype(dtype):
    """Return the canonical name of ``dtype`` (a string, numpy dtype or Python type).

    >>> canonical_dtype(np.float32)
    'float32'
    """
    if isinstance(dtype, str) and dtype in ALL_DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in ALL_DTYPES:
        raise DTypeError(f"unsupported dtype {dtype!r}; expected one of {', '.join(ALL_DTYPES)}")
    return name


def is_float(dtype):
    return dtype in FLOAT_DTYPES


def is_int(dtype):
    return dtype in INT_DTYPES


def is_bool(dtype):
    return dtype == "bool"


def python_scalar_dtype(value):
    """The dtype a bare Python number gets when nothing else decides it."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, numbers.Integral):
        return INDEX_DTYPE if -2**31 <= int(value) < 2**31 else "int64"
    if isinstance(value, numbers.Real):
        return "float32"
    raise DTypeError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


def promote_python_scalar(value, dtype):
    """The dtype of a Python scalar combined with an expression of ``dtype``.

    A number takes the expression's dtype, but a float never silently becomes an integer.
    """
    if isinstance(value, (bool, np.bool_)):
        if is_bool(dtype):
            return dtype
        raise DTypeError(f"cannot combine the Python bool {value!r} with a {dtype} expression")
    if isinstance(value, numbers.Integral):
        if is_bool(dtype):
            raise DTypeError(f"cannot combine the integer {value!r} with a bool expression")
        return dtype
    if isinstance(value, numbers.Real):
        if is_float(dtype):
            return dtype
        raise DTypeError(
            f"cannot combine the float {value!r} with a {dtype} expression; use tg.cast")
    raise DTypeError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


def unify_dtypes(a, b, what):
    """The common dtype of two operands: equal dtypes, or two integer dtypes (widened).

    ``what`` names the operation in the error message; it may be a function returning
    the text, so that callers print an expression only when there is an error.
    """
    if a == b:
        return a
    if is_int(a) and is_int(b):
        return np.promote_types(a, b).name
    what = what() if callable(what) else what
    raise DTypeError(f"dtype mismatch in {what}: {a} and {b}; insert tg.cast to convert explicitly")


def min_value(dtype):
    """The smallest finite value of ``dtype`` as a Python number."""
    dtype = canonical_dtype(dtype)
    if is_float(dtype):
        return float(np.finfo(dtype).min)
    if is_bool(dtype):
        return False
    return int(np.iinfo(dtype).min)


def max_value(dtype):
    """The largest finite value of ``dtype`` as a Python number."""
    dtype = canonical_dtype(dtype)
    if is_float(dtype):
        return float(np.finfo(dtype).max)
    if is_bool(dtype):
        return True
    return int(np.iinfo(dtype).max)
