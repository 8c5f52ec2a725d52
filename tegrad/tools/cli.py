"""The command line: ``python -m tegrad COMMAND`` (or the ``tegrad`` console script).

Commands: ``demo`` (train on scikit-learn's digits with compiled gradients),
``explain OP [--attr value ...]`` (an operator's gradients before and after zero
elimination; ``explain OP --help`` lists its attributes) and ``export`` (native code for
C callers). Options are checked before a command does any work. Each command is a pair in ``COMMANDS``: a function adding its arguments to
a subparser and one running it.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import tegrad
from tegrad.codegen.export import cli as export_cli
from tegrad.ir.errors import TegradError


def _demo_arguments(p):
    from tegrad.tools.demo import DEFAULTS, MODELS
    p.add_argument("--model", choices=sorted(MODELS), default="mlp",
                   help="mlp: 64-HIDDEN-10; cnn: conv-relu-maxpool-conv-relu-dense on 1x8x8")
    p.add_argument("--epochs", type=int, help="default: "
                   + ", ".join(f"{m} {d['epochs']}" for m, d in DEFAULTS.items()))
    p.add_argument("--hidden", type=int, help="hidden units (mlp) or channels of the second "
                   "convolution (cnn); default: "
                   + ", ".join(f"{m} {d['hidden']}" for m, d in DEFAULTS.items()))
    p.add_argument("--lr", type=float, help="initial learning rate (it decays to 0 along "
                   "a half cosine); default: "
                   + ", ".join(f"{m} {d['lr']}" for m, d in DEFAULTS.items()))
    p.add_argument("--batch", type=int, help="batch size (the last partial batch of an "
                   "epoch is dropped); default: "
                   + ", ".join(f"{m} {d['batch']}" for m, d in DEFAULTS.items()))
    p.add_argument("--seed", type=int, default=0, help="weights and shuffling (the "
                   "train/test split is fixed)")
    p.add_argument("--threads", type=int, help="threads of the compiled functions")
    p.add_argument("--save", metavar="PATH", help="save the trained weights as .npz")


def _demo(args):
    from tegrad.tools.demo import DemoError, run
    _check_demo_options(args)
    try:
        run(model=args.model, epochs=args.epochs, hidden=args.hidden, lr=args.lr,
            batch=args.batch, seed=args.seed, threads=args.threads, save=args.save)
    except DemoError as err:
        raise _UsageError(str(err)) from None


def _check_demo_options(args):
    """Every option of ``demo`` that can be checked before loading data or compiling."""
    for name in ("epochs", "hidden", "batch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise _UsageError(f"--{name} must be at least 1, got {value}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        raise _UsageError(f"--lr must be a positive number, got {args.lr}")
    if args.seed < 0:
        raise _UsageError(f"--seed must be at least 0, got {args.seed}")
    if args.save is not None:
        folder = os.path.dirname(os.path.abspath(args.save))
        if not os.path.isdir(folder):
            raise _UsageError(f"--save {args.save}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise _UsageError(f"--save {args.save}: the folder {folder} is not writable")


def _explain_arguments(p):
    p.add_argument("op", help="an operator of tegrad.ops or tegrad.nn, e.g. conv2d")
    p.add_argument("attrs", nargs=argparse.REMAINDER, metavar="--attr value",
                   help="operator attributes, e.g. --stride 2 --padding 1; values are "
                   "ints, floats, tuples (2,2), true/false, none or strings; "
                   "explain OP --help lists the operator's attributes")


def _explain(args):
    from tegrad.tools.explain_op import ExplainError, explain, usage
    try:
        if "-h" in args.attrs or "--help" in args.attrs:
            print(usage(args.op))
            return
        print(explain(args.op, _attribute_pairs(args.attrs)))
    except ExplainError as err:
        raise _UsageError(str(err)) from None


def _attribute_pairs(tokens):
    """``--name value`` / ``--name=value`` tokens as a dict (dashes in names become
    underscores), the values parsed by ``parse_value``."""
    from tegrad.tools.explain_op import parse_value
    pairs, i = {}, 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or token == "--":
            raise _UsageError(f"expected --attribute value, got {token!r}")
        name, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 >= len(tokens) or tokens[i + 1].startswith("--"):
                raise _UsageError(f"attribute --{name} has no value")
            value = tokens[i + 1]
            i += 1
        pairs[name.replace("-", "_")] = parse_value(value)
        i += 1
    return pairs


#: command -> (add its arguments, run it, one-line help)
COMMANDS = {
    "demo": (_demo_arguments, _demo,
             "train on scikit-learn's handwritten digits with compiled gradients"),
    "explain": (_explain_arguments, _explain,
                "an operator's gradients before and after zero elimination, with costs"),
    "export": (export_cli.add_arguments, export_cli.run, export_cli.HELP),
}


class _UsageError(Exception):
    pass


def parser():
    """The argument parser of ``python -m tegrad``."""
    p = argparse.ArgumentParser(prog="tegrad", description="tegrad's command line tools")
    p.add_argument("--version", action="version", version=f"tegrad {tegrad.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_arguments, _, help_text) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return p


def main(argv=None):
    """Run a command; returns the exit status (2 for a usage error, 1 for a TegradError)."""
    args = parser().parse_args(argv)
    try:
        # options every command shares are checked before the command does any work
        threads = getattr(args, "threads", None)
        if threads is not None and threads < 1:
            raise _UsageError(f"--threads must be at least 1, got {threads}")
        COMMANDS[args.command][1](args)
    except _UsageError as err:
        print(f"tegrad {args.command}: error: {err}", file=sys.stderr)
        return 2
    except TegradError as err:
        print(f"tegrad {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of the output went away (| head)
        sys.stdout = open(os.devnull, "w")
        return 1
    return 0
