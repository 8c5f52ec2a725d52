"""The on-disk cache of machine code (``tegrad.codegen.object_cache``): a second process
building the same program loads the code instead of compiling it, and gets the same
results; a corrupted entry is compiled again and replaced; two processes writing one
entry at once both succeed and leave a whole one; ``TEGRAD_CACHE=0`` writes nothing; the
directory is trimmed to its bound, least recently used first; another program's process
finds the shared routines by name."""
import json
import os
import subprocess
import sys
import time

import pytest

from tegrad.codegen import object_cache

PROGRAM = r"""
import json, sys
import numpy as np, tegrad as tg
from tegrad.codegen import object_cache
x = tg.placeholder((48, 40), dtype="float32", name="x")
w = tg.placeholder((40, 56), dtype="float32", name="w")
g = tg.placeholder((48, 56), dtype="float32", name="g")
y = tg.nn.relu(tg.ops.matmul(x, w))
outputs = [y, *tg.differentiate(y, [x, w], head=g)]
f = tg.build([x, w, g], outputs, threads=int(sys.argv[1]))
rng = np.random.default_rng(0)
arrays = [rng.standard_normal(t.shape).astype("float32") for t in (x, w, g)]
got = f(*arrays)
want = tg.evaluate(outputs, dict(zip([x, w, g], arrays)))
error = max(float(np.abs(a - b).max()) for a, b in zip(got, want))
print(json.dumps({"stats": object_cache.STATS, "error": error,
                  "sums": [float(a.astype("float64").sum()) for a in got]}))
"""


def _run(directory, threads=2, env=None, wait=True):
    environment = dict(os.environ, TEGRAD_CACHE_DIR=str(directory), **(env or {}))
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(threads)], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc if not wait else _result(proc)


def _result(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["error"] < 1e-3
    return result


def _entries(directory):
    return sorted(directory.glob("*/*.o"))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_second_process_loads_the_code_and_gets_the_same_results(tmp_path, threads):
    first = _run(tmp_path, threads)
    assert first["stats"]["misses"] > 0 and first["stats"]["writes"] == first["stats"]["misses"]
    assert len(_entries(tmp_path)) == first["stats"]["writes"]
    second = _run(tmp_path, threads)
    assert second["stats"]["misses"] == 0 and second["stats"]["hits"] == first["stats"]["misses"]
    assert second["sums"] == first["sums"]


def test_a_corrupted_entry_is_compiled_again_and_replaced(tmp_path):
    first = _run(tmp_path)
    for k, path in enumerate(_entries(tmp_path)):
        data = bytearray(path.read_bytes())
        if k % 2:
            data[len(data) // 2] ^= 0xFF          # a flipped byte
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(bytes(data[: len(data) // 3]))   # a torn write
    second = _run(tmp_path)
    assert second["stats"]["corrupt"] == len(_entries(tmp_path)) == first["stats"]["writes"]
    assert second["sums"] == first["sums"]
    third = _run(tmp_path)
    assert third["stats"]["misses"] == 0 and third["sums"] == first["sums"]


def test_concurrent_writers_both_succeed_and_leave_whole_entries(tmp_path):
    procs = [_run(tmp_path, wait=False) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert results[0]["sums"] == results[1]["sums"]
    assert not list(tmp_path.glob("*/.tmp-*"))
    after = _run(tmp_path)
    assert after["stats"]["misses"] == 0 and after["stats"]["corrupt"] == 0


def test_cache_off_writes_nothing_and_an_unwritable_directory_is_no_error(tmp_path):
    off = _run(tmp_path / "off", env={"TEGRAD_CACHE": "0"})
    assert not (tmp_path / "off").exists() and off["stats"]["writes"] == 0
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    blocked = _run(blocker / "cache")
    assert blocked["stats"]["writes"] == 0 and blocked["stats"]["misses"] > 0


def test_the_directory_is_trimmed_least_recently_used_first(tmp_path, monkeypatch):
    monkeypatch.setenv("TEGRAD_CACHE_DIR", str(tmp_path))
    keys = [object_cache.entry_key(f"module {k}", "t", "c", "f") for k in range(6)]
    for k, key in enumerate(keys):
        assert object_cache.store(key, bytes([k]) * 1000)
        os.utime(tmp_path / key[:2] / f"{key}.o", (time.time() - 100 + k,) * 2)
    assert object_cache.load(keys[0]) is not None  # used now: the most recent
    object_cache._trim(tmp_path, limit=3 * 1100)
    kept = {p.stem for p in _entries(tmp_path)}
    assert keys[0] in kept and keys[5] in kept and keys[1] not in kept
    assert sum(p.stat().st_size for p in _entries(tmp_path)) <= 3 * 1100


ROUTINES = r"""
import json, sys
import numpy as np, tegrad as tg
from tegrad.codegen import object_cache
from tegrad.codegen.target import jit
emitted = []
compiled = jit._compiled
jit._compiled = lambda module: emitted.append(module.name) or compiled(module)
n = int(sys.argv[1])
a = tg.placeholder((24 + n, 40), dtype="float32", name="a")
b = tg.placeholder((40, 8 + 3 * n), dtype="float32", name="b")
y = tg.ops.matmul(a, b)
f = tg.build([a, b], [y], threads=2)
rng = np.random.default_rng(n)
arrays = [rng.standard_normal(t.shape).astype("float32") for t in (a, b)]
error = float(np.abs(f(*arrays)[0] - tg.evaluate([y], dict(zip([a, b], arrays)))[0]).max())
print(json.dumps({"routines": object_cache.STATS_OF["routine"], "emitted": emitted,
                  "error": error}))
"""


def _run_routines(directory, n):
    # built programs not cached: each process emits its kernel, and its routines unless
    # it finds them by name
    run = subprocess.run([sys.executable, "-c", ROUTINES, str(n)], capture_output=True,
                         text=True, timeout=600,
                         env=dict(os.environ, TEGRAD_CACHE_DIR=str(directory),
                                  TEGRAD_PROGRAM_CACHE="0"))
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["error"] < 1e-3
    return result


def test_another_program_finds_the_shared_routines_by_name_without_emitting_them(tmp_path):
    """The gemm's routines and the thread pool an earlier process compiled are loaded by
    their names in a process building another program (their modules not emitted, only
    the routines the new shapes need besides); a routine's entry that does not check,
    or whose machine code is gone, is made again."""
    first = _run_routines(tmp_path, 1)
    made = first["emitted"]
    assert made and first["routines"]["hits"] == 0
    assert first["routines"]["writes"] == len(made) == len(list(tmp_path.glob("*/*.routine")))
    second = _run_routines(tmp_path, 2)
    assert not set(second["emitted"]) & set(made) and second["routines"]["hits"] >= 2
    assert second["routines"]["misses"] == len(second["emitted"])
    assert _run_routines(tmp_path, 1)["emitted"] == []
    for path in tmp_path.glob("*/*.routine"):
        data = bytearray(path.read_bytes())
        data[-2] ^= 0x5A
        path.write_bytes(bytes(data))
    corrupted = _run_routines(tmp_path, 1)
    assert sorted(corrupted["emitted"]) == sorted(made)
    assert corrupted["routines"]["corrupt"] == len(made)
    for path in tmp_path.glob("*/*.o"):
        path.unlink()
    gone = _run_routines(tmp_path, 1)
    assert sorted(gone["emitted"]) == sorted(made) and gone["routines"]["writes"] == len(made)
    assert _run_routines(tmp_path, 1)["emitted"] == []
