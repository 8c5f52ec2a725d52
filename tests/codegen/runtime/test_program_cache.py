"""The on-disk cache of built programs (``tegrad.codegen.runtime.program_cache``): a second
process building the same programs (random ones, forward and gradient, on 1 and 2
threads, with and without bounds checks) neither lowers nor schedules them and gets the
same results (non-finite ones too, which a product's rare branch computes), loops,
schedule, memory report, pickles and export; a corrupted or torn
entry is built again; an entry of another compiler source is not used; ``TEGRAD_CACHE=0``
writes nothing; a program with a user-defined reducer builds without the cache."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import Phase, given, settings, strategies as st

import tegrad as tg
from tegrad.codegen import object_cache
from tegrad.codegen.runtime import builder, program_cache

#: the tests' directory, where the random programs' generators are
TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: builds the programs of the seeds it is given, and prints what the test compares
PROGRAM = r"""
import hashlib, json, os, pickle, sys, tempfile
import numpy as np, tegrad as tg
from tegrad.codegen import object_cache
from tegrad.codegen.runtime import builder
from tegrad.codegen.runtime.program_key import program_key
from tegrad.ir.reduction import Reducer
sys.path.insert(0, sys.argv[1])
from support.compiled_programs import build_program, with_gradient
from support.random_programs import Seeded

if os.environ.get("FINGERPRINT"):  # another compiler's source
    object_cache.source_fingerprint = lambda: os.environ["FINGERPRINT"]
lowered = []
compile_kernel = builder.compile_kernel
builder.compile_kernel = lambda *a, **k: lowered.append(1) or compile_kernel(*a, **k)
digest = lambda text: hashlib.sha256(text.encode()).hexdigest()


def user_reducer(value):  # a user-defined reducer in the program's key (by identity)
    if isinstance(value, tuple):
        return any(user_reducer(v) for v in value)
    return isinstance(value, Reducer)


full = sys.argv[2] == "full"  # else small programs, built and run alone
out = []
for k, seed in enumerate(map(int, sys.argv[3:])):
    # a small program on 1 thread, a large one on 2 threads with bounds checks
    program = build_program(Seeded(np.random.default_rng(seed)), large=full and k % 2 == 1)
    threads, check_bounds = 1 + k % 2, k % 2 == 1
    inputs, outputs, feed = with_gradient(program, seed)
    before = len(lowered)
    f = tg.build(inputs, outputs, threads=threads, check_bounds=check_bounds)
    arrays = [feed[t] for t in inputs]
    got = f(*arrays)
    want = tg.evaluate(outputs, feed)
    error = max(float(np.abs(a - b).max() / (1 + np.abs(b).max())) for a, b in zip(got, want))
    seen = {"error": error, "user_reducer": user_reducer(program_key(inputs, outputs)),
            "results": [a.tobytes().hex() for a in got],
            "loops": digest(f.loops), "schedule": digest(str(f.schedule))}
    if full:
        # its own schedule replayed (another name: another program)
        seen["replayed"] = digest(tg.build(inputs, outputs, threads=threads, name="again",
                                           check_bounds=check_bounds, schedule=f.schedule).loops)
        again = pickle.loads(pickle.dumps(f))
        seen["unpickled"] = [a.tobytes().hex() for a in again(*arrays)]
        header = tempfile.mkdtemp()
        f.export(os.path.join(header, "lib"))
        seen["header"] = digest(open(os.path.join(header, "lib.h")).read())
        seen.update(memory=str(f.memory), llvm_ir=digest(f.llvm_ir))
        # a non-finite input: a product's exact loops, compiled when first needed
        arrays[0].flat[0] = np.nan
        seen["non_finite"] = [a.tobytes().hex() for a in f(*arrays)]
    seen["lowered"] = len(lowered) - before
    out.append(seen)
print(json.dumps({"programs": out, "stats": object_cache.STATS_OF}))
"""


def _run(directory, seeds, env=None, full=False):
    """Build the programs of ``seeds`` in a new process (the k-th on 1 thread for even k,
    on 2 threads with bounds checks for odd k) and return what it printed; ``full``: the
    odd ones large, and each one's schedule also replayed, itself pickled and
    exported."""
    environment = dict(os.environ, TEGRAD_CACHE_DIR=str(directory))
    for name in ("TEGRAD_CHECK_BOUNDS", "TEGRAD_CACHE", "TEGRAD_PROGRAM_CACHE"):
        environment.pop(name, None)
    environment.update(env or {})
    run = subprocess.run([sys.executable, "-c", PROGRAM, TESTS, "full" if full else "light",
                          *map(str, seeds)],
                         env=environment, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for p in result["programs"]:
        assert p["error"] < 1e-9 and p.get("unpickled", p["results"]) == p["results"]
    return result


def _entries(directory, kind="program"):
    return sorted(directory.glob(f"*/*{object_cache.KINDS[kind][0]}"))


def _same_programs(first, second, *differ):
    """The same results, loops, schedules, memory reports, pickles and exports (and what
    else but ``differ``) in ``first`` and ``second``."""
    for a, b in zip(first["programs"], second["programs"]):
        assert {k: v for k, v in a.items() if k not in ("lowered",) + differ} == \
               {k: v for k, v in b.items() if k not in ("lowered",) + differ}


# one example (each costs three processes), not shrunk
@settings(max_examples=1, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(seeds=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2))
def test_a_second_process_builds_from_the_cache_without_lowering(tmp_path_factory, seeds):
    directory = tmp_path_factory.mktemp("cache")
    first = _run(directory, seeds, full=True)
    # each program, its replayed schedule (another name: another program) and, on every
    # core, its unpickled copy (for threads=None) has an entry, but those with a
    # user-defined reducer (built as without the cache)
    writes = first["stats"]["program"]["writes"]
    cached = sum(not p["user_reducer"] for p in first["programs"])
    assert writes == len(_entries(directory)) >= 2 * cached
    assert all(p["lowered"] >= 2 for p in first["programs"])
    second = _run(directory, seeds, full=True)
    assert second["stats"]["program"]["hits"] == writes
    assert second["stats"]["program"]["writes"] == 0
    assert [p["lowered"] for p in second["programs"]] == \
        [p["lowered"] if p["user_reducer"] else 0 for p in first["programs"]]
    # the optimised IR printed from the machine code's first module (which LLVM's code
    # generation changed) or from its IR optimised again, as when the object cache
    # alone has the machine code (below)
    _same_programs(first, second, "llvm_ir")
    # an entry written by another compiler's source is not used
    other = _run(directory, seeds[:1], env={"FINGERPRINT": "another compiler"}, full=True)
    assert other["stats"]["program"]["hits"] == 0
    assert other["programs"][0]["lowered"] == first["programs"][0]["lowered"]
    _same_programs(first, other, "llvm_ir")
    _same_programs(second, other)


def test_a_corrupted_or_torn_entry_is_built_again(tmp_path):
    first = _run(tmp_path, [3, 4])  # two small programs
    assert first["stats"]["program"]["writes"] == 2
    for k, path in enumerate(_entries(tmp_path)):
        data = bytearray(path.read_bytes())
        if k % 2:
            data[len(data) // 2] ^= 0xFF  # a flipped byte
        else:
            data = data[:len(data) // 3]  # a torn write
        path.write_bytes(bytes(data))
    second = _run(tmp_path, [3, 4])
    assert second["stats"]["program"]["corrupt"] == 2
    assert second["stats"]["program"]["writes"] == 2
    assert [p["lowered"] for p in second["programs"]] == [1, 1]
    _same_programs(first, second)
    third = _run(tmp_path, [3, 4])
    assert third["stats"]["program"]["hits"] == 2
    assert [p["lowered"] for p in third["programs"]] == [0, 0]


def test_the_source_fingerprint_follows_every_file(tmp_path, monkeypatch):
    package = tmp_path / "fingerprinted"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "m.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(object_cache, "COMPILER_PACKAGES", ("fingerprinted",))
    seen = []
    for edit in ("x = 1\n", "x = 2\n", "x = 1\n"):
        (package / "sub" / "m.py").write_text(edit)
        object_cache.source_fingerprint.cache_clear()
        seen.append(object_cache.source_fingerprint())
    (package / "sub" / "n.py").write_text("")
    object_cache.source_fingerprint.cache_clear()
    seen.append(object_cache.source_fingerprint())
    object_cache.source_fingerprint.cache_clear()
    assert seen[0] == seen[2] and len(set(seen)) == 3


def test_cache_off_writes_nothing_and_the_program_cache_alone_can_be_off(tmp_path):
    off = _run(tmp_path / "off", [1], env={"TEGRAD_CACHE": "0"})
    assert not (tmp_path / "off").exists() and off["programs"][0]["lowered"] == 1
    assert off["stats"]["program"]["writes"] == off["stats"]["object"]["writes"] == 0
    _run(tmp_path / "objects", [1], env={"TEGRAD_PROGRAM_CACHE": "0"})
    assert _entries(tmp_path / "objects", "object") and not _entries(tmp_path / "objects")


def test_a_user_defined_reducer_builds_without_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TEGRAD_CACHE", raising=False)
    monkeypatch.delenv("TEGRAD_PROGRAM_CACHE", raising=False)
    tg.clear_cache()
    logsumexp = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                                lambda dtype: tg.min_value(dtype), name="lse_cached")
    x = tg.placeholder((3, 4), dtype="float64", name="x")
    k = tg.reduce_axis((0, 4), name="k")
    y = tg.compute((3,), lambda i: logsumexp(x[i, k], axis=k), name="y")
    writes = dict(program_cache.STATS)
    a = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_allclose(tg.build([x], [y])(a)[0], np.log(np.exp(a).sum(1)))
    assert program_cache.STATS == writes and not _entries(tmp_path)
    z = tg.compute((3,), lambda i: tg.sum(x[i, k], axis=k), name="z")
    np.testing.assert_allclose(tg.build([x], [z])(a)[0], a.sum(1))
    assert len(_entries(tmp_path)) == 1


@pytest.mark.parametrize("value, canonical", [
    (("a", 1, (2.5, None, True)), True), ((np.float64(1.0),), False),
    ((float("nan"),), False), ((object(),), False)])
def test_only_plain_values_have_a_canonical_form(value, canonical):
    assert (program_cache.canonical(value) is not None) == canonical


@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(size=st.integers(5, 12), channels=st.integers(1, 3), threads=st.sampled_from([1, 2]))
def test_a_program_read_back_runs_its_rare_branch_and_prints_the_same(tmp_path_factory, size,
                                                                    channels, threads):
    # the same process, its own cache cleared, reads the entry it wrote, as another would
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TEGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        patch.delenv("TEGRAD_CACHE", raising=False)
        patch.delenv("TEGRAD_PROGRAM_CACHE", raising=False)
        # a padded convolution: its product is exact for finite operands only, the rare
        # branch of its own loops (compiled when first needed) for the others
        x = tg.placeholder((2, channels, size, size + 1), dtype="float64", name="x")
        w = tg.placeholder((4, channels, 3, 3), dtype="float64", name="w")
        y = tg.nn.conv2d(x, w, padding=1)
        outputs = [y, *tg.differentiate(y, [x, w])]
        rng = np.random.default_rng(size * channels)
        arrays = [rng.standard_normal(t.shape) for t in (x, w)]
        non_finite = [a.copy() for a in arrays]
        non_finite[1][0, 0, 0, 0] = np.inf  # (a weight: the product checks those)
        tg.clear_cache()
        f = tg.build([x, w], outputs, threads=threads)
        want = [f(*arrays), f(*non_finite)]
        tg.clear_cache()
        patch.setattr(builder, "compile_kernel", lambda *a, **k: pytest.fail("lowered"))
        hits = program_cache.STATS["hits"]
        g = tg.build([x, w], outputs, threads=threads)
        assert program_cache.STATS["hits"] == hits + 1 and g._executable is not f._executable
        assert "kernel" not in vars(g._executable)  # not read yet: running needs no kernel
        deferred = g._executable._running
        got = [g(*arrays), g(*non_finite)]
        assert g._executable._running is not deferred  # the rare branch compiled
        for outs, expected in zip(got, want):
            for a, b in zip(outs, expected):
                np.testing.assert_array_equal(a, b)
        assert g.loops == f.loops and str(g.schedule) == str(f.schedule)
        assert g.memory == f.memory and g._executable.emitted_ir == f._executable.emitted_ir
    tg.clear_cache()
