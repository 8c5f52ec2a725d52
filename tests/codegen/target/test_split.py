"""A kernel's module compiled in parts (``split_module``, ``compile_objects``): the parts
of real kernels' modules parse and verify, define each of the module's functions and
globals once and declare what they use from the others, keep ``internal`` what no
other part uses, and linked into one engine run as the whole does; concurrent compiles
make the same machine code as one at a time; LLVM's notes on declined vectorisation
stay off stderr while optimisations overlap."""
import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.codegen import object_cache
from tegrad.codegen.llvm import emit as emit_module
from tegrad.codegen.target import jit
from tegrad.codegen.target.concurrent import compile_objects
from tegrad.codegen.target.split import split_module

from support.llvm_text import FORCED_BUT_SCALAR

_DEFINED = re.compile(r'^(?:define [^@]*|)@("[^"]+"|[-\w$.]+)(?: = (\w+ )?)?', re.M)


def _definitions(text):
    """``{symbol: internal?}`` of the functions and globals ``text`` defines."""
    out = {}
    for line in text.splitlines():
        if line.startswith("define "):
            name = re.search(r'@("[^"]+"|[-\w$.]+)', line).group(1)
            out[name] = line.startswith("define internal")
        elif line.startswith("@"):
            name = line.split(" = ")[0][1:]
            out[name] = " = internal " in line or " = private " in line
    return out


def _layers_module(width, depth):
    """The IR text of a small MLP's training step (``depth`` dense layers of ``width``),
    its parts one function per statement, and the function running it."""
    x = tg.placeholder((32, width), dtype="float64", name="x")
    ws = [tg.placeholder((width, width), dtype="float64", name=f"w{k}") for k in range(depth)]
    h = x
    for w in ws:
        h = nn.relu(nn.dense(h, w))
    head = tg.placeholder(h.shape, dtype="float64", name="head")
    loss = tg.ops.sum(tg.ops.multiply(h, head))
    outputs = [loss, *tg.differentiate(loss, ws)]
    return [x, *ws, head], outputs


def _module_text(inputs, outputs, name):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit_module, "PART_SIZE", 1)
        f = tg.build(inputs, outputs, threads=1, name=name)
    return f, f._executable.loaded._ir_text


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([8, 24, 40]), st.integers(1, 3), st.integers(1, 9))
def test_parts_define_everything_once_and_link_into_the_whole(width, depth, parts):
    inputs, outputs = _layers_module(width, depth)
    f, text = _module_text(inputs, outputs, f"split_{width}_{depth}")
    pieces = split_module(text, parts)
    assert 1 <= len(pieces) <= parts
    whole = _definitions(text)
    defined = [_definitions(p) for p in pieces]
    assert sorted(n for d in defined for n in d) == sorted(whole)  # each once
    for k, (piece, mine) in enumerate(zip(pieces, defined)):
        llvm.parse_assembly(piece).verify()
        others = "\n".join(p for j, p in enumerate(pieces) if j != k)
        for name, internal in mine.items():
            used_apart = re.search(rf'@{re.escape(name)}\W', others) is not None
            # internal stays internal unless another part uses it
            assert internal == (whole[name] and not used_apart), name
    # linked into one engine, the parts run as the whole module does
    objects = compile_objects(pieces, lambda: jit.new_target_machine(jit.KERNEL),
                              unroll=False, workers=2)
    jit.await_requested()
    with jit._lock:
        engine = object_cache.engine_of(objects, jit.new_target_machine(jit.KERNEL))
    rng = np.random.default_rng(width * 10 + depth)
    arrays = [rng.standard_normal(t.shape) for t in inputs]
    want = f(*arrays)
    executable = f._executable
    name = executable.facts.name
    pointers = [a.ctypes.data for a in arrays] + [np.empty(o.shape).ctypes.data
                                                  for o in outputs]
    results = [np.empty(o.shape) for o in outputs]
    pointers[len(arrays):] = [r.ctypes.data for r in results]
    pointers += [a.ctypes.data for a in executable.storage_arrays]
    table = (ctypes.c_void_p * len(pointers))(*pointers)
    status = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(
        engine.get_function_address(name))(table)
    assert status == 0
    for got, expected in zip(results, want):
        np.testing.assert_array_equal(got, expected)


def test_concurrent_compiles_make_the_same_code_as_one_at_a_time():
    inputs, outputs = _layers_module(40, 3)
    _, text = _module_text(inputs, outputs, "split_same_code")
    pieces = split_module(text, 6) * 2
    machine = lambda: jit.new_target_machine(jit.KERNEL)  # noqa: E731
    alone = compile_objects(pieces, machine, unroll=False, workers=1)
    for _ in range(3):
        assert compile_objects(pieces, machine, unroll=False, workers=4) == alone


def test_declined_vectorization_notes_stay_off_stderr_while_optimisations_overlap(capfd):
    from tegrad.codegen.target.machine import Target
    from tegrad.codegen.target.optimise import optimise

    errors, start = [], threading.Barrier(4)

    def run():
        try:
            start.wait(30)
            for _ in range(5):
                module = llvm.parse_assembly(FORCED_BUT_SCALAR,
                                             context=llvm.create_context())
                optimise(module, Target.host().target_machine(), unroll=False,
                         concurrent=True)
                assert "isvectorized" not in str(module)
                module.close()
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    err = capfd.readouterr().err
    assert "loop not vectorized" not in err, err
