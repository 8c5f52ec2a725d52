"""tegrad programs as PyTorch operators: :func:`operator`.

``tegrad.torch.operator(inputs, outputs, name=...)`` compiles a program with
:func:`tegrad.build` and registers it with ``torch.library`` as the custom operator
``tegrad::<name>``. Called on tensors it returns tensors, and autograd differentiates it:
its backward is :func:`tegrad.differentiate` of the outputs, with the incoming gradients
as heads, compiled for the inputs that need a gradient (each set of them built the first
time it is needed, then cached). That backward is a tegrad operator too, so second
derivatives work, and ``torch.compile`` keeps the operator as one opaque node.

PyTorch is an optional dependency (``pip install "tegrad[torch]"``); importing this
module without it raises :class:`TorchNotInstalledError`.

>>> import torch, tegrad as tg, tegrad.torch
>>> x = tg.placeholder((3,), dtype="float64", name="x")
>>> y = tg.compute((3,), lambda i: x[i] * x[i], name="y")
>>> square = tegrad.torch.operator([x], [y], name="doctest_square")
>>> t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
>>> square(t).sum().backward()
>>> t.grad.tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

import keyword
import math
import re
import threading

import numpy as np

from tegrad.codegen.runtime.builder import build, flatten_tensors
from tegrad.codegen.runtime.program_key import program_key
from tegrad.codegen.tuning import DENSE_TEMPLATE_BYTES
from tegrad.ir import dtypes as _dt
from tegrad.ir.errors import DTypeError, FeedError, ShapeError, TegradError
from tegrad.ir.stages import is_placeholder
from tegrad.ir.tensor import compute, placeholder
from tegrad.pipeline import differentiate


class TorchNotInstalledError(TegradError, ImportError):
    """PyTorch, which :mod:`tegrad.torch` needs, is not installed."""


try:
    import torch
except ImportError as err:
    raise TorchNotInstalledError(
        "tegrad.torch needs PyTorch, which is not installed; install it with "
        "pip install \"tegrad[torch]\" (it pins the CPU build tegrad is tested with)") from err

_Tensor = torch.Tensor
_from_numpy = torch.from_numpy
_empty_like = torch.empty_like
_grad_enabled = torch.is_grad_enabled
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
# a torch function mode answers even the tensor properties the pointer path reads
# (torch.device(...) is one): under one, tensors go through .numpy()
_function_modes = torch._C._is_torch_function_mode_enabled
_functorch_active = torch._C._are_functorch_transforms_active

#: the namespace of the registered operators (``torch.ops.tegrad.<name>``)
NAMESPACE = "tegrad"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: name -> (key of its program, Operator); a name is registered with torch once per process
_registry = {}
_registry_lock = threading.Lock()


def _torch_dtype(dtype):
    # numpy is the common ground: tegrad dtypes are numpy's names
    return torch.from_numpy(np.empty(0, dtype=np.dtype(dtype))).dtype


def _output_templates(outputs, dtypes):
    """One tensor per output whose ``torch.empty_like`` is a new C-contiguous CPU tensor of
    the output's shape and dtype (the cheapest allocation from Python: 2.8 us a call on a
    2-core AMD EPYC, torch.empty(shape, dtype=...) 5 us): small outputs' are such a tensor,
    larger ones' one element expanded, which holds no memory. None if this PyTorch lays
    an expanded one's out otherwise (checked on the meta device, which allocates
    nothing)."""
    templates = []
    for t, dtype in zip(outputs, dtypes):
        if math.prod(t.shape) * dtype.itemsize <= DENSE_TEMPLATE_BYTES:
            templates.append(torch.empty(t.shape, dtype=dtype))
            continue
        ones = (1,) * len(t.shape)
        if not _empty_like(torch.empty(ones, dtype=dtype, device="meta")
                           .expand(t.shape)).is_contiguous():
            return None
        templates.append(torch.empty(ones, dtype=dtype).expand(t.shape))
    return tuple(templates)


def _in_place_reader(kinds, templates, run):
    """``read(tensors, grad)``: the outputs (a tuple of new tensors) the kernel computes
    through ``run`` (its entry on data pointers) when every tensor is one it can read in
    place: a ``torch.Tensor`` (no subclass) of its input's dtype and shape (``kinds``:
    ``(dtype, shape, low bits of an element-aligned address)`` per input), on the CPU,
    C-contiguous, not a lazily negated view, its data present and element-aligned, and
    (when ``grad``) not requiring a gradient; else None, computing nothing (the caller
    then takes the path that checks, copies and names the argument). The outputs are
    ``torch.empty_like`` of ``templates``: new, so none overlaps an input.

    Its source is written out here per input, as namedtuple's is, because a call is
    timed in microseconds: reading a tensor's properties from Python costs 0.1-0.3 us
    each, and a loop over the inputs 1,100 instructions per input more than these
    straight lines (callgrind: 20.3k against 17.0k for three inputs' checks).

    >>> t = torch.zeros(2)
    >>> read = _in_place_reader([(t.dtype, t.shape, 3)], [t], lambda pointers: None)
    >>> [o.shape for o in read((t,), False)], read((t.double(),), False)
    ([torch.Size([2])], None)
    """
    env = {"Tensor": _Tensor, "empty_like": _empty_like, "run": run}
    lines = ["def read(tensors, grad):",
             f"    {''.join(f't{k}, ' for k in range(len(kinds)))}= tensors",
             "    try:"]
    aligned = []
    for k, (dtype, shape, low_bits) in enumerate(kinds):
        env[f"dtype{k}"], env[f"shape{k}"] = dtype, shape
        t = f"t{k}"
        lines += [f"        if (type({t}) is not Tensor or {t}.dtype is not dtype{k}",
                  f"                or {t}.shape != shape{k} or not {t}.is_cpu",
                  f"                or not {t}.is_contiguous() or {t}.is_neg()",
                  f"                or grad and {t}.requires_grad):",
                  "            return None",
                  f"        p{k} = {t}.data_ptr()"]
        # 0: no data (a zero tensor; an empty one, which needs no pointer, is refused too)
        aligned.append(f"not p{k}" + (f" or p{k} & {low_bits}" if low_bits else ""))
    lines += ["    except RuntimeError:",
              "        return None  # no strided data at all (sparse, mkldnn, nested)",
              f"    if {' or '.join(aligned)}:",
              "        return None"]
    for j, template in enumerate(templates):
        env[f"template{j}"] = template
        lines.append(f"    o{j} = empty_like(template{j})")
    pointers = [f"p{k}" for k in range(len(kinds))]
    pointers += [f"o{j}.data_ptr()" for j in range(len(templates))]
    lines += [f"    run([{', '.join(pointers)}])",
              f"    return ({''.join(f'o{j}, ' for j in range(len(templates)))})"]
    # (the source is built above from counts and names of its own)
    exec(compile("\n".join(lines), "<tegrad.torch pointer path>", "exec"), env)  # noqa: S102
    return env["read"]


def _check_name(name):
    if not isinstance(name, str) or not _NAME.match(name):
        raise TegradError(f"operator: name must be an identifier (letters, digits and _), "
                          f"got {name!r}")
    return name


def _check_program(inputs, outputs):
    inputs = flatten_tensors(inputs, caller="operator", what="inputs")
    outputs = flatten_tensors(outputs, caller="operator", what="outputs")
    if not inputs:
        # the registered operator's outputs are created on its inputs' device
        raise TegradError("operator: inputs is empty; an operator takes at least one tensor")
    for t in inputs:
        if not is_placeholder(t):
            raise TegradError(f"operator: inputs must be placeholders, got {t!r}")
    if not outputs:
        raise TegradError("operator: outputs is empty; an operator returns at least one tensor")
    if len({id(t) for t in outputs}) != len(outputs):
        raise TegradError("operator: outputs lists a tensor twice (a PyTorch operator's "
                          "outputs may not alias each other)")
    return inputs, outputs


def _schema(inputs, outputs):
    """``(Tensor x, Tensor w) -> (Tensor, Tensor)``, with the placeholders' names where
    they are usable argument names."""
    names, seen = [], set()
    for k, t in enumerate(inputs):
        n = t.name
        if not (n and _NAME.match(n) and not keyword.iskeyword(n) and n not in seen
                and n.lower() not in {"tensor", "self", "out", "int", "float", "bool"}):
            n = f"arg{k}"
        while n in seen:
            n = f"{n}_{k}"
        seen.add(n)
        names.append(n)
    args = ", ".join(f"Tensor {n}" for n in names)
    result = "Tensor" if len(outputs) == 1 else f"({', '.join(['Tensor'] * len(outputs))})"
    return f"({args}) -> {result}"


class _Apply(torch.autograd.Function):
    """The eager route with gradients (the registered operator's autograd computes the
    same, through the dispatcher, at several times the cost per call)."""

    @staticmethod
    def forward(ctx, op, *tensors):
        ctx.op = op
        ctx.save_for_backward(*tensors)
        outs = op._run(tensors)
        ints = [o for o, f in zip(outs, op._float_out) if not f]
        if ints:
            ctx.mark_non_differentiable(*ints)
        return outs[0] if op._single else outs

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + ctx.op._backward(ctx.saved_tensors, grads, ctx.needs_input_grad[1:])


class Operator:
    """A tegrad program as a differentiable PyTorch operator (see :func:`operator`).

    ``op(*tensors)`` returns a tensor, or a tuple for several outputs. ``op.custom_op`` is
    the ``torch.library`` operator (``torch.ops.tegrad.<name>``), ``op.function`` the
    compiled forward, ``op.vjp(mask)`` the backward operator for the inputs ``mask`` marks.
    """

    def __init__(self, inputs, outputs, function, *, name, threads):
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.name, self.threads = name, threads
        self._n = len(self.inputs)
        self._single = len(self.outputs) == 1
        self._in_dtypes = tuple(_torch_dtype(t.dtype) for t in self.inputs)
        self._out_dtypes = tuple(_torch_dtype(t.dtype) for t in self.outputs)
        self._float_in = tuple(_dt.is_float(t.dtype) for t in self.inputs)
        self._float_out = tuple(_dt.is_float(t.dtype) for t in self.outputs)
        # what a tensor read in place must be, per input: (dtype, shape, the low bits of
        # an element-aligned address)
        self._in_kinds = tuple((d, torch.Size(t.shape), d.itemsize - 1)
                               for t, d in zip(self.inputs, self._in_dtypes))
        self._templates = _output_templates(self.outputs, self._out_dtypes)
        self.function = function
        self._vjps = {}
        self._vjp_lock = threading.Lock()
        self.custom_op = self._register()

    @property
    def function(self):
        """The compiled forward (a :class:`~tegrad.codegen.runtime.compiled.CompiledFunction`)."""
        return self._function

    @function.setter
    def function(self, function):
        self._function = function
        # the kernel's entry on data pointers, where ordinary tensors are read and the
        # outputs allocated by PyTorch (anything else given as the function, say one
        # wrapping it, is called on arrays)
        raw = getattr(function, "_run_pointers", None)
        self._in_place = None
        if raw is not None and self._templates is not None:
            self._in_place = _in_place_reader(self._in_kinds, self._templates, raw)

    # -- calls --------------------------------------------------------------------------

    def __call__(self, *tensors):
        if len(tensors) != self._n:
            names = ", ".join(t.name for t in self.inputs)
            raise FeedError(f"operator {self.name!r} takes {self._n} tensors ({names}), got "
                            f"{len(tensors)}")
        # torch.compile, tracing and fake modes and functorch transforms must see the
        # registered operator; a plain eager call skips the dispatcher, which costs tens
        # of microseconds (this path is timed in microseconds: see _in_place_reader).
        # Dynamo reads is_dynamo_compiling() as True while it traces; is_compiling()
        # (0.3 us) is also True in export's and make_fx's tracing, whose tensors are fake
        # or under a dispatch mode, both caught here or by _unusual.
        if _is_dynamo_compiling() or _dispatch_modes() or _functorch_active():
            return self.custom_op(*tensors)
        in_place = self._in_place
        if in_place is not None and not _function_modes():
            outs = in_place(tensors, _grad_enabled())
            if outs is not None:
                return outs[0] if self._single else outs
        grad = False
        for t, dtype in zip(tensors, self._in_dtypes):
            if type(t) is not _Tensor or t.dtype is not dtype:
                return self._unusual(tensors)
            if t.requires_grad:
                grad = True
        if grad and _grad_enabled():
            return _Apply.apply(self, *tensors)
        outs = self._run_arrays(tensors)
        return outs[0] if self._single else outs

    def _unusual(self, tensors):
        """A call with a tensor subclass (fake, functional, ...) goes through the
        dispatcher; anything but a tensor, or a tensor of the wrong dtype, is refused,
        naming the argument."""
        for k, t in enumerate(tensors):
            if not isinstance(t, _Tensor) or type(t) is _Tensor:
                self._check_one(k, t)
        return self.custom_op(*tensors)

    def _run(self, tensors):
        """The outputs (a tuple of tensors) of the compiled function on ``tensors``, whose
        CPU memory it reads in place where it can (else a copy)."""
        in_place = self._in_place
        if in_place is not None and not _function_modes():
            outs = in_place(tensors, False)
            if outs is not None:
                return outs
        return self._run_arrays(tensors)

    def _run_arrays(self, tensors):
        """:meth:`_run` through the compiled function's checked path on numpy arrays
        (sharing the tensors' memory where ``.numpy()`` can, else copies)."""
        try:
            arrays = []
            append = arrays.append
            for t, dtype in zip(tensors, self._in_dtypes):
                # dtypes must match exactly (the gradients PyTorch expects have the inputs'
                # dtypes), though a compiled function converts exactly representable values
                if t.dtype is not dtype:
                    raise TypeError
                append(t.numpy())
        except (RuntimeError, TypeError, AttributeError):
            # not a tensor, not on the CPU, needing a gradient, or a lazy view: the checks
            # name the argument, then a copy on the CPU
            arrays = [self._array(k, t) for k, t in enumerate(tensors)]
        try:
            outs = self._function(*arrays)
        except (DTypeError, ShapeError, FeedError):
            self._check(tensors)  # the same error in PyTorch's terms
            raise
        return tuple(map(_from_numpy, outs))

    def _describe(self, k):
        t = self.inputs[k]
        return f"argument {t.name!r} of operator {self.name!r} (shape {t.shape}, " \
               f"{self._in_dtypes[k]})"

    def _check(self, tensors):
        """Raise a ``TegradError`` naming the first tensor of the wrong kind."""
        for k, t in enumerate(tensors):
            self._check_one(k, t)

    def _check_one(self, k, t):
        if not isinstance(t, torch.Tensor):
            raise FeedError(f"{self._describe(k)} must be a torch.Tensor, got "
                            f"{type(t).__name__}")
        if t.dtype != self._in_dtypes[k]:
            raise DTypeError(f"{self._describe(k)} was given a tensor of dtype {t.dtype}; "
                             f"convert it with .to({self._in_dtypes[k]})")
        if tuple(t.shape) != self.inputs[k].shape:
            raise ShapeError(f"{self._describe(k)} was given a tensor of shape "
                             f"{tuple(t.shape)}")

    def _array(self, k, t):
        self._check_one(k, t)
        if t.device.type != "cpu":
            raise TegradError(f"{self._describe(k)} is on {t.device}; tegrad runs on the CPU "
                              f"(move it with .cpu())")
        return t.detach().resolve_conj().resolve_neg().contiguous().numpy()

    # -- gradients ----------------------------------------------------------------------

    def vjp(self, mask):
        """The operator computing the gradients of the inputs ``mask`` marks (a tuple of
        bools, one per input) from the inputs and one head per float output: built the
        first time, then cached."""
        mask = tuple(bool(m) for m in mask)
        op = self._vjps.get(mask)
        if op is None:
            self._check_mask(mask)
        if op is not None:
            return op
        with self._vjp_lock:
            op = self._vjps.get(mask)
            if op is None:
                op = self._vjps[mask] = self._build_vjp(mask)
        return op

    def _check_mask(self, mask):
        if len(mask) != self._n or not any(mask):
            raise TegradError(f"vjp of operator {self.name!r}: mask must mark some of its "
                              f"{self._n} inputs, got {mask!r}")
        for m, t, is_float in zip(mask, self.inputs, self._float_in):
            if m and not is_float:
                raise TegradError(f"vjp of operator {self.name!r}: mask marks the input "
                                  f"{t.name!r} of dtype {t.dtype}; only float inputs have "
                                  f"gradients")

    def _build_vjp(self, mask):
        wrt = [t for t, m in zip(self.inputs, mask) if m]
        heads, per_input = [], [[] for _ in wrt]
        for out, is_float in zip(self.outputs, self._float_out):
            if not is_float:
                continue
            head = placeholder(out.shape, dtype=out.dtype, name=f"grad_{out.name}")
            heads.append(head)
            for k, g in enumerate(differentiate(out, wrt, head=head)):
                per_input[k].append(g)
        grads = [terms[0] if len(terms) == 1 else _total(terms, f"d{x.name}")
                 for x, terms in zip(wrt, per_input)]
        bits = "".join("1" if m else "0" for m in mask)
        return operator(self.inputs + heads, grads, name=f"{self.name}_vjp{bits}",
                        threads=self.threads)

    def _backward(self, inputs, grads, needs):
        """The gradients (a tuple, None where none is needed) of ``inputs`` given the
        incoming ``grads`` of the outputs."""
        mask = tuple(bool(n) and f for n, f in zip(needs, self._float_in))
        if not any(mask) or not any(self._float_out):
            return (None,) * self._n
        heads = []
        for g, out, dtype, is_float in zip(grads, self.outputs, self._out_dtypes,
                                           self._float_out):
            if is_float:
                heads.append(torch.zeros(out.shape, dtype=dtype) if g is None else g)
        result = self.vjp(mask)(*inputs, *heads)
        result = iter((result,) if sum(mask) == 1 else result)
        return tuple(next(result) if m else None for m in mask)

    # -- registration -------------------------------------------------------------------

    def _register(self):
        op = torch.library.custom_op(f"{NAMESPACE}::{self.name}", self._impl, mutates_args=(),
                                     schema=_schema(self.inputs, self.outputs))
        op.register_fake(self._fake)
        op.register_autograd(self._autograd_backward, setup_context=self._setup_context)
        return op

    def _impl(self, *tensors):
        outs = self._run(tensors)
        return outs[0] if self._single else outs

    def _fake(self, *tensors):
        # shapes and dtypes are checked while tracing, so torch.compile reports them early
        for k, t in enumerate(tensors):
            self._check_one(k, t)
        device = tensors[0].device
        outs = tuple(tensors[0].new_empty(t.shape, dtype=d, device=device)
                     for t, d in zip(self.outputs, self._out_dtypes))
        return outs[0] if self._single else outs

    def _setup_context(self, ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def _autograd_backward(self, ctx, *grads):
        return self._backward(ctx.saved_tensors, grads, ctx.needs_input_grad)

    def __repr__(self):
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<tegrad.torch.Operator {NAMESPACE}::{self.name}({ins}) -> [{outs}]>"


def _total(terms, name):
    """The element-wise sum of same-shape tensors (one input's gradient from each output)."""
    first = terms[0]

    def body(*i):
        value = first[i]
        for t in terms[1:]:
            value = value + t[i]
        return value
    return compute(first.shape, body, name=name)


def operator(inputs, outputs, *, name, threads=None):
    """The program computing ``outputs`` from the placeholders ``inputs`` as a PyTorch
    operator, registered as ``torch.ops.tegrad.<name>``.

    Call it with one ``torch.Tensor`` per input: it returns a tensor (a tuple for several
    outputs) and autograd differentiates it with respect to its float inputs. Contiguous
    CPU tensors are read in place; others are copied. ``threads`` is
    :func:`tegrad.build`'s. A name is registered once per process: building the same
    program under the same name again returns the same operator, a different program
    under a taken name raises ``TegradError``.

    >>> import torch, tegrad as tg, tegrad.torch
    >>> a = tg.placeholder((2,), dtype="float32", name="a")
    >>> b = tg.compute((2,), lambda i: a[i] + 1.0, name="b")
    >>> inc = tegrad.torch.operator([a], [b], name="doctest_increment")
    >>> inc(torch.zeros(2)).tolist()
    [1.0, 1.0]
    """
    name = _check_name(name)
    inputs, outputs = _check_program(inputs, outputs)
    function = build(inputs, outputs, threads=threads, name=name)
    key = (program_key(inputs, outputs), threads)
    with _registry_lock:
        known = _registry.get(name)
        if known is not None:
            if known[0] != key:
                raise TegradError(f"operator: the name {name!r} is taken by another program "
                                  f"in this process (torch.ops.{NAMESPACE}.{name}); choose "
                                  f"another name")
            return known[1]
        op = Operator(inputs, outputs, function, name=name, threads=threads)
        _registry[name] = (key, op)
    return op


__all__ = ["NAMESPACE", "Operator", "TorchNotInstalledError", "operator"]
