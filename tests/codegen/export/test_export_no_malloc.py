"""Exported libraries allocate nothing (issue #27): the matrix products pack into the
caller's workspace, so neither the ``.ll``, nor the object's undefined symbols, name
``malloc``, ``calloc``, ``realloc`` or ``free``, for one thread or two, through
``tg.export`` and ``f.export``; the libraries, called through ctypes with a workspace of
the size the ABI reports (filled with garbage: nothing may rely on its contents), compute
what ``tg.evaluate`` does, and no error code says "out of memory" any more."""
import ctypes
import re

import numpy as np
import pytest

import tegrad as tg
from tegrad import nn
from tegrad.codegen.loops.printer import format_kernel

from support.native import aligned_workspace, elf_machine_and_symbols
from support.programs import matmul, mlp_gradient

ALLOCATORS = {"malloc", "calloc", "realloc", "free"}


def conv_step():
    """A conv2d 8x32x32x32 -> 64 training step: forward and both gradients for a head."""
    x = tg.placeholder((8, 32, 32, 32), name="x")
    w = tg.placeholder((64, 32, 3, 3), name="w")
    y = nn.conv2d(x, w, padding=1)
    head = tg.placeholder(y.shape, name="head")
    return [x, w, head], [y] + list(tg.differentiate(y, [x, w], head=head))


PROGRAMS = {"matmul": matmul, "conv_step": conv_step, "mlp_gradient": mlp_gradient}


def called_allocators(ll_text):
    """The allocator functions an LLVM module declares or calls."""
    return set(re.findall(r'@"?(malloc|calloc|realloc|free)"?\(', ll_text))


def assert_allocates_nothing(result):
    assert called_allocators(result.ll_path.read_text()) == set()
    assert not ALLOCATORS & set(result.undefined), result.undefined
    _, needed = elf_machine_and_symbols(result.object_path, undefined=True)
    assert not ALLOCATORS & needed, needed
    entry = result.entries[0]
    assert all(kind != "out_of_memory" for _, kind, _ in entry.checks)
    assert "out of memory" not in result.header_path.read_text()


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """``(program, threads) -> (inputs, outputs, tg.export result)``."""
    folder = tmp_path_factory.mktemp("no_malloc")
    done = {}
    for program, make in PROGRAMS.items():
        inputs, outputs = make()
        for threads in (1, 2):
            result = tg.export(inputs, outputs, folder / f"{program}{threads}", name="p",
                               threads=threads, llvm_ir=True)
            done[program, threads] = inputs, outputs, result
    return done


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_an_export_calls_no_allocator(exports, program, threads):
    inputs, outputs, result = exports[program, threads]
    assert "gemm(" in format_kernel(result.kernels["p"])  # a product packs
    assert_allocates_nothing(result)
    assert f"#define P_THREADS {threads}" in result.header_path.read_text()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("program", ["matmul", "mlp_gradient"])
def test_a_built_functions_export_calls_no_allocator(program, threads, tmp_path):
    inputs, outputs = PROGRAMS[program]()
    f = tg.build(inputs, outputs, name="p", threads=3 - threads)
    assert_allocates_nothing(f.export(tmp_path / "lib", threads=threads, llvm_ir=True))


def garbage_workspace(nbytes):
    """``nbytes`` of 0xff at a 64-byte aligned address (an entry point's requirement)."""
    space = aligned_workspace(nbytes)
    space.fill(0xFF)
    return space


@pytest.fixture(scope="module")
def evaluated(exports):
    """``program -> (input arrays, tg.evaluate's outputs)`` for the programs called."""
    rng = np.random.default_rng(27)
    out = {}
    for program in ("matmul", "conv_step"):
        inputs, outputs, _ = exports[program, 1]
        arrays = [rng.standard_normal(t.shape).astype("float32") for t in inputs]
        out[program] = arrays, tg.evaluate(outputs, dict(zip(inputs, arrays)))
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("program", ["matmul", "conv_step"])
def test_the_library_through_ctypes_equals_evaluate(exports, evaluated, program, threads):
    inputs, outputs, result = exports[program, threads]
    assert result.library_path is not None, result.message
    library = ctypes.CDLL(str(result.library_path))
    arrays, want = evaluated[program]
    entry = result.entries[0]
    # the packing space is part of the workspace the ABI reports: a panel per thread
    single = exports[program, 1][2].entries[0].workspace_bytes
    assert entry.workspace_bytes > single if threads == 2 else entry.workspace_bytes == single
    got = [np.full(t.shape, np.nan, np.float32) for t in outputs]
    workspace = garbage_workspace(entry.workspace_bytes)
    args = [ctypes.c_void_p(a.ctypes.data) for a in arrays + got + [workspace]]
    for _ in range(2):  # a second call reuses the workspace as the first left it
        assert library.p(*args) == 0
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)
