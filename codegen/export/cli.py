"""The ``export`` command, ``python -m tegrad export MODEL.py [--target T] [-o OUT]``.

For example ``python -m tegrad export model.py --target aarch64-linux-gnu -o build/step``.

``MODEL.py`` is an ordinary Python file, run once (with ``__name__`` set to
``"__tegrad_export__"``, so a ``if __name__ == "__main__":`` block does not run). It defines,
at module level, either

- ``inputs`` and ``outputs``: lists of tensors (``inputs`` the placeholders in the order the
  C entry point takes them; ``outputs`` the results, e.g. ``[loss] + list(grads)`` for a
  ``tg.differentiate`` result ``grads``), exported as one entry point named by ``--name``
  (default: the file name of ``-o``); or
- ``exports``: a dict ``{entry point name: (inputs, outputs)}`` for several entry points
  in one library (a training step and an evaluation function, say).

Example ``model.py``::

    import tegrad as tg
    x = tg.placeholder((4, 3), name="x")
    w = tg.placeholder((2, 3), name="w")
    inputs, outputs = [x, w], [tg.nn.dense(x, w)]

The command writes ``OUT.o``, ``OUT.h`` and, when a linker for the target is found,
``OUT.so`` and prints what it wrote; it exits with status 0, or 1 after printing the problem.
:func:`add_arguments` and :func:`run` are the command for a parser with subcommands;
:func:`export_main` runs it on its own.
"""
from __future__ import annotations

import argparse
import pathlib
import runpy
import sys

from tegrad.codegen.export.errors import ExportError
from tegrad.codegen.export.program import default_entry_name, export_program
from tegrad.ir.errors import TegradError
from tegrad.ir.tensor import Tensor

#: ``__name__`` of a model file while the command runs it
MODEL_RUN_NAME = "__tegrad_export__"


#: one line saying what the command does
HELP = "export programs as native code (object file, C header, shared library) for this " \
       "machine or another"


def add_arguments(p):
    """Add the command's arguments to the ``argparse`` parser ``p``."""
    p.add_argument("model", help="Python file defining `inputs` and `outputs`, or `exports`")
    p.add_argument("-o", "--output", help="output path without suffix (default: the model "
                                          "file's name in the current directory)")
    p.add_argument("--target", help="target triple, e.g. aarch64-linux-gnu (default: this "
                                    "machine)")
    p.add_argument("--cpu", help="CPU name (default: this machine's for the host, a portable "
                                 "baseline for another target)")
    p.add_argument("--features", help="LLVM features added to the CPU's, e.g. +avx2,-fma "
                                      "(names the target does not know are refused)")
    p.add_argument("--name", help="entry point name when the model defines `inputs` and "
                                  "`outputs` (default: the output's file name)")
    p.add_argument("--linker", help="C compiler driver that links the shared library "
                                    "(default: cc for the host, <triple>-gcc otherwise)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads the library's parallel loops run on (default: 1, none)")
    p.add_argument("--check-bounds", action="store_true",
                   help="check every element access at run time (a failure returns its code)")
    p.add_argument("--schedule", choices=("auto", "none"), default="auto",
                   help="auto: tg.build's automatic schedule (default); none: every "
                        "stage's loops as written")
    p.add_argument("--llvm-ir", action="store_true",
                   help="also write OUT.ll, the text of the optimised LLVM module")
    return p


def parser():
    """The command's own parser (``python -m tegrad export``)."""
    return add_arguments(argparse.ArgumentParser(prog="python -m tegrad export",
                                                 description=HELP))


def load_exports(model_path, *, name):
    """``{entry point name: (inputs, outputs)}`` from the model file (see the module doc)."""
    path = pathlib.Path(model_path)
    if not path.is_file():
        raise ExportError(f"model file {str(path)!r} not found")
    try:
        namespace = runpy.run_path(str(path), run_name=MODEL_RUN_NAME)
    except TegradError:
        raise
    except Exception as e:  # the model's own mistake, reported in one line
        raise ExportError(f"running {path} raised {type(e).__name__}: {e}") from e
    if "exports" in namespace:
        exports = namespace["exports"]
        if not isinstance(exports, dict) or not exports:
            raise ExportError(f"{path}: `exports` must be a non-empty dict "
                              f"{{name: (inputs, outputs)}}, got {type(exports).__name__}")
    elif "inputs" in namespace and "outputs" in namespace:
        exports = {name: (namespace["inputs"], namespace["outputs"])}
    else:
        raise ExportError(f"{path} defines neither `inputs` and `outputs` nor `exports`")
    for entry, pair in exports.items():
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ExportError(f"{path}: export {entry!r} must be a pair (inputs, outputs)")
        inputs, outputs = pair
        if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, Tensor) for t in inputs):
            raise ExportError(f"{path}: the inputs of export {entry!r} must be a list of "
                              f"tensors (placeholders)")
        if isinstance(outputs, Tensor):
            raise ExportError(f"{path}: the outputs of export {entry!r} must be a list of "
                              f"tensors, not the single tensor {outputs.name!r}")
    return exports


def run(args, *, lower=None, make_module=None):
    """Export what the parsed ``args`` say and print what was written; a problem raises a
    :class:`TegradError`. ``lower`` and ``make_module`` replace the default lowering and
    backend."""
    output = args.output or pathlib.Path(args.model).stem
    name = args.name or default_entry_name(output)
    exports = load_exports(args.model, name=name)
    result = export_program(exports, output, target=args.target, cpu=args.cpu,
                            features=getattr(args, "features", None), linker=args.linker,
                            lower=lower, make_module=make_module, threads=args.threads,
                            check_bounds=getattr(args, "check_bounds", False),
                            schedule="none" if getattr(args, "schedule", "auto") == "none"
                            else None, llvm_ir=getattr(args, "llvm_ir", False))
    print(f"exported {', '.join(e.name for e in result.entries)} for {result.target.triple}")
    print(f"  {result.object_path}\n  {result.header_path}")
    if result.ll_path is not None:
        print(f"  {result.ll_path}")
    print(f"  {result.message}")
    return result


def export_main(argv=None, *, lower=None, make_module=None):
    """Run the command with ``argv`` (the words after ``export``); return the exit status:
    0, or 1 after printing the problem (2 for bad usage, from ``argparse``)."""
    args = parser().parse_args(argv)
    try:
        run(args, lower=lower, make_module=make_module)
    except TegradError as e:
        print(f"tegrad export: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0
