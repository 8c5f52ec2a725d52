"""Machine code kept on disk, so that a second process compiling the same kernel loads it
instead of running LLVM again (most of a large program's build: the transformer's
training step spends most of its build in LLVM's optimisation and code generation).

An entry is the object code LLVM made for one module, keyed by the SHA-256 of everything
the code depends on: the module's IR text (which holds the program, the schedule and
every decision made for it), the target (triple, CPU, features), whether it was
optimised, and the versions of tegrad, llvmlite and LLVM. A file holds a magic line, the
SHA-256 of its payload and the payload; one that does not check (a torn or corrupted
write, another format) is removed and the module compiled again. Writes go to a private
temporary file renamed into place, so concurrent writers of one entry each leave a whole
file. The directory is kept under :data:`~tegrad.codegen.tuning.OBJECT_CACHE_BYTES`,
dropping the least recently used entries first.

The directory is ``TEGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/tegrad`` or
``~/.cache/tegrad``; ``TEGRAD_CACHE=0`` turns the cache off. A directory that cannot be
written is no error: the module is compiled, as without a cache.

>>> import tempfile, os
>>> os.environ["TEGRAD_CACHE_DIR"] = tempfile.mkdtemp()
>>> k = entry_key("define void @f() { ret void }", "x86_64-unknown-linux-gnu", "znver3", "")
>>> load(k) is None, store(k, b"object code"), load(k)
(True, True, b'object code')
>>> del os.environ["TEGRAD_CACHE_DIR"]
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pathlib
import tempfile

import llvmlite
import llvmlite.binding as llvm

from tegrad.codegen.tuning import OBJECT_CACHE_BYTES

#: the first line of every entry (a new format gets a new line: old entries then fail to
#: check and are compiled again)
MAGIC = b"tegrad object code 1\n"

#: hits and misses of this process (for tests and ``tegrad`` users who wonder)
STATS = {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0}


def cache_dir():
    """The cache's directory (a ``pathlib.Path``), or None when ``TEGRAD_CACHE=0``."""
    if os.environ.get("TEGRAD_CACHE", "1").strip() == "0":
        return None
    root = os.environ.get("TEGRAD_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".cache")
        root = os.path.join(base, "tegrad")
    return pathlib.Path(root)


def _versions():
    try:
        version = importlib.metadata.version("tegrad")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return f"tegrad {version}; llvmlite {llvmlite.__version__}; LLVM " \
           f"{'.'.join(map(str, llvm.llvm_version_info))}"


def entry_key(ir_text, triple, cpu, features, optimised=True):
    """The key of the object code of ``ir_text`` for the target ``triple``/``cpu``/
    ``features`` (hex SHA-256)."""
    h = hashlib.sha256()
    level = optimised if isinstance(optimised, str) else ("O3" if optimised else "O0")
    for part in (_versions(), triple, cpu, features, level):
        h.update(part.encode())
        h.update(b"\0")
    h.update(ir_text.encode())
    return h.hexdigest()


def _path(directory, key):
    return directory / key[:2] / f"{key}.o"


def load(key):
    """The object code stored under ``key``, or None (no cache, no entry, or an entry
    that does not check, which is removed)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = _path(directory, key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + 64
    payload = data[head:]
    if not (data.startswith(MAGIC) and data[len(MAGIC):head]
            == hashlib.sha256(payload).hexdigest().encode() and payload):
        STATS["corrupt"] += 1
        try:
            path.unlink()
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # most recently used: kept longest
    except OSError:
        pass
    return payload


def store(key, payload):
    """Store ``payload`` under ``key``; False when the directory cannot be written."""
    directory = cache_dir()
    if directory is None:
        return False
    path = _path(directory, key)
    data = MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temporary, path)  # atomic: a reader sees the old file or this one
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
    except OSError:
        return False
    STATS["writes"] += 1
    _trim(directory)
    return True


def loaded_engine(key, target_machine):
    """An MCJIT engine (on ``target_machine``, which it owns) holding the object code
    stored under ``key``, finalised; None when there is none."""
    data = load(key)
    if data is None:
        STATS["misses"] += 1
        return None
    STATS["hits"] += 1
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine)
    engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    return engine


def finalize_and_store(engine, key):
    """Finalise ``engine`` (compiling its module), storing the object code under
    ``key``."""
    made = []
    engine.set_object_cache(notify_func=lambda module, data: made.append(bytes(data)))
    engine.finalize_object()
    if made:
        store(key, made[0])


def _trim(directory, limit=None):
    """Remove the least recently used entries while the directory holds more than
    ``limit`` bytes (default :data:`OBJECT_CACHE_BYTES`)."""
    limit = OBJECT_CACHE_BYTES if limit is None else limit
    entries = []
    try:
        for path in directory.glob("*/*.o"):
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        try:
            path.unlink()
            total -= size
        except OSError:
            pass


__all__ = ["MAGIC", "STATS", "cache_dir", "entry_key", "finalize_and_store", "load",
           "loaded_engine", "store"]
