"""The memory plan: buffers of disjoint lifetimes share the storage of a compiled function
(and the workspace of an export), and nothing else does.

Checked on random kernel bodies (the plan's invariants, and that no function of the
emitted module holds two buffers sharing memory), and on compiled chains of products
whose temporaries die one after another (values equal ``tg.evaluate``, on 1 and 2
threads, with the workspace below the sum of the temporaries).
"""
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.ir.expr import Const
from tegrad.codegen.loops.mapper import buffers_of
from tegrad.codegen.loops.nodes import Block, Buffer, Kernel, Load, Store
from tegrad.codegen.llvm import kernel_buffers as kb
from tegrad.codegen.llvm.emit import kernel_parts
from tegrad.codegen.llvm.kernel_buffers import (PACKING_SPACE, SHARED_MIN_BYTES,
                                                STORAGE_ALIGNMENT,
                                                buffer_bytes, in_place_kernel, live_ranges,
                                                plan_storage)
from tegrad.codegen.tuning import PLACEMENT_SLACK

ZERO = Const(0, "int64")


@st.composite
def bodies(draw):
    """``(body, buffers)``: a kernel body of 1-12 statements, each writing one buffer and
    reading up to three others, over 1-10 buffers of 1-3000 float64 elements."""
    sizes = draw(st.lists(st.integers(1, 3000), min_size=1, max_size=10))
    buffers = [Buffer(f"t{k}", (n,), "float64") for k, n in enumerate(sizes)]
    stmts = []
    for _ in range(draw(st.integers(1, 12))):
        target = draw(st.sampled_from(buffers))
        reads = draw(st.lists(st.sampled_from(buffers), max_size=3))
        value = Const(1.0, "float64")
        for b in reads:
            value = value + Load(b, (ZERO,))
        stmts.append(Store(target, (ZERO,), value))
    return Block(tuple(stmts)), buffers


def _intersect(r, s):
    return r[0] <= s[1] and s[0] <= r[1]


@settings(max_examples=150, deadline=None)
@given(bodies())
def test_plan_shares_memory_only_between_disjoint_lifetimes(case):
    body, buffers = case
    plan = plan_storage(body, buffers)
    ranges = live_ranges(body, buffers)
    spans = {b: (plan.offsets[b], plan.offsets[b] + buffer_bytes(b)) for b in buffers}
    for b in buffers:
        assert plan.offsets[b] % STORAGE_ALIGNMENT == 0
        assert spans[b][1] <= plan.nbytes
    for a in buffers:
        for b in buffers:
            if a == b:
                continue
            overlap = spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
            assert overlap == plan.sharing(a, b)
            # (a chain of writes in place: tests/codegen/llvm/test_in_place_temporaries.py)
            if overlap and not plan.one_chain(a, b):
                assert not _intersect(ranges[a], ranges[b]), (a, b)
                assert min(buffer_bytes(a), buffer_bytes(b)) >= SHARED_MIN_BYTES - STORAGE_ALIGNMENT
    assert plan.nbytes <= plan.separate_bytes
    # never below the buffers alive at one statement
    n = len(body.stmts)
    for k in range(n):
        alive = [b for b in buffers if ranges[b][0] <= k <= ranges[b][1]]
        # (a chain of writes in place: one buffer)
        alive = sum(buffer_bytes(b) for n, b in enumerate(alive)
                    if not any(plan.one_chain(b, c) for c in alive[:n]))
        assert plan.nbytes >= alive


@settings(max_examples=150, deadline=None)
@given(bodies())
def test_no_part_of_a_kernel_holds_two_buffers_sharing_memory(case):
    body, buffers = case
    plan = plan_storage(body, buffers)
    # as the emitter takes it: each temporary written in place named as its chain's first
    body = in_place_kernel(Kernel("k", (), tuple(buffers), body), plan).body
    parts = kernel_parts(body, plan)
    assert [s for part in parts for s in part] == list(body.stmts)
    for part in parts:
        used = {b for s in part for b in buffers if b in live_users(s)}
        assert not any(plan.sharing(a, b) for a in used for b in used)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8), st.integers(1, 40)),
                min_size=1, max_size=40))
def test_the_placement_kept_is_near_the_peak_or_the_best_of_all_orders(spans):
    # buffers of (first statement, statements more, 64-byte lines), placed as plan_storage
    # places the units of a kernel's temporaries
    names = [f"b{k}" for k in range(len(spans))]
    ranges = {n: (lo, lo + more) for n, (lo, more, _) in zip(names, spans)}
    nbytes_of = {n: lines * STORAGE_ALIGNMENT for n, (_, _, lines) in zip(names, spans)}
    offsets = kb._best_placement(names, ranges, nbytes_of)
    for a in names:
        for b in names:
            if a < b and _intersect(ranges[a], ranges[b]):
                assert (offsets[a] + nbytes_of[a] <= offsets[b]
                        or offsets[b] + nbytes_of[b] <= offsets[a]), (a, b)
    extent = kb._extent(offsets, nbytes_of)
    floor = kb._peak_alive(ranges, nbytes_of)
    assert extent >= floor
    if extent > floor * (1 + PLACEMENT_SLACK):
        # no early stop: the smallest block of every order the search tries
        with mock.patch.object(kb, "PLACEMENT_SLACK", -1.0):
            assert extent == kb._extent(kb._best_placement(names, ranges, nbytes_of),
                                        nbytes_of)


def live_users(stmt):
    used, allocated = buffers_of(stmt)
    return set(used) | allocated


def _chain(n, size, dtype):
    """``x @ w0 @ w1 ... @ w{depth-1}``, each product a stage of its own whose value dies
    once the next is computed, and the sum of the last weighted by ``g``."""
    x = tg.placeholder((size, size), dtype=dtype, name="x")
    ws = [tg.placeholder((size, size), dtype=dtype, name=f"w{k}") for k in range(n)]
    g = tg.placeholder((size, size), dtype=dtype, name="g")
    h = x
    for k, w in enumerate(ws):
        r = tg.reduce_axis((0, size), name=f"r{k}")
        h = tg.compute((size, size), lambda i, j, h=h, w=w, r=r:
                       tg.sum(h[i, r] * w[r, j], axis=r), name=f"h{k}")
    r, c = tg.reduce_axis((0, size), name="ri"), tg.reduce_axis((0, size), name="rj")
    loss = tg.compute((), lambda: tg.sum(h[r, c] * g[r, c], axis=[r, c]), name="loss")
    return [x, *ws, g], loss


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("depth, size, dtype", [(4, 40, "float64"), (5, 33, "float32")])
def test_a_chain_of_products_shares_its_temporaries_and_equals_the_evaluator(
        threads, depth, size, dtype):
    rng = np.random.default_rng(depth * 100 + size)
    inputs, loss = _chain(depth, size, dtype)
    grads = tg.differentiate(loss, inputs[:2])
    outputs = [loss, *grads]
    arrays = [rng.uniform(-1, 1, t.shape).astype(dtype) for t in inputs]
    f = tg.build(inputs, outputs, threads=threads)
    memory = f.memory
    assert memory.workspace < memory.workspace_unshared, memory
    assert memory.peak == memory.inputs + memory.outputs + memory.workspace
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    tol = 1e-10 if dtype == "float64" else 2e-4
    for _ in range(2):  # a second call reuses the storage whose buffers were shared
        for a, b in zip(f(*arrays), want):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_forward_chain_workspace_is_about_two_temporaries():
    """The forward chain needs two products alive at once (and the products' packing
    space), whatever its depth."""
    inputs, loss = _chain(6, 64, "float64")
    temp = 64 * 64 * 8
    f = tg.build(inputs, [loss], threads=1)
    plan = f._executable.storage_plan
    packing = sum(buffer_bytes(b) for b in plan.offsets if b.name == PACKING_SPACE)
    assert f.memory.workspace_unshared >= 6 * temp
    assert f.memory.workspace <= 2 * temp + packing + 3 * STORAGE_ALIGNMENT


def test_an_export_takes_the_planned_workspace(tmp_path):
    inputs, loss = _chain(4, 48, "float64")
    f = tg.build(inputs, [loss], threads=1)
    result = f.export(str(tmp_path / "chain"))
    entry = result.entries[0]
    assert entry.workspace_bytes == f.memory.workspace
    assert entry.workspace_bytes < f.memory.workspace_unshared
    header = (tmp_path / "chain.h").read_text()
    assert f"{entry.workspace_bytes}" in header
