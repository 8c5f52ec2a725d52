"""The on-disk cache of machine code (``tegrad.codegen.object_cache``): a second process
building the same program loads the code instead of compiling it, and gets the same
results; a corrupted entry is compiled again and replaced; two processes writing one
entry at once both succeed and leave a whole one; ``TEGRAD_CACHE=0`` writes nothing; the
directory is trimmed to its bound, least recently used first."""
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
