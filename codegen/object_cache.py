"""Machine code kept on disk, so that a second process compiling the same kernel loads it
instead of running LLVM again (most of a large program's build: the transformer's
training step spends most of its build in LLVM's optimisation and code generation).
The same directory holds two more kinds of entry, a built program
(:mod:`tegrad.codegen.runtime.program_cache`) and, per shared routine of the JIT, the key
of its machine code (:func:`tegrad.codegen.target.jit.shared_function`, which then need
not emit the routine to find it): every kind is a file of its own suffix (:data:`KINDS`)
with the same format, checks and bound.

An entry is the object code LLVM made for one module (one object file, or one per part
of a module compiled in parts: :func:`pack_objects`), keyed by the SHA-256 of everything
the code depends on: the module's IR text (which holds the program, the schedule and
every decision made for it), the target (triple, CPU, features), whether it was
optimised, and the versions of tegrad, llvmlite and LLVM. A file holds a magic line, the
SHA-256 of its payload and the payload; one that does not check (a torn or corrupted
write, another format) is removed and the module compiled again. Writes go to a private
temporary file renamed into place, so concurrent writers of one entry each leave a whole
file. The directory is kept under :data:`~tegrad.codegen.tuning.OBJECT_CACHE_BYTES`,
dropping the least recently used entries first.

Entries that depend on the compiler itself (a built program holds its loops, not only
their machine code) are keyed by :func:`source_fingerprint` too, so an edited compiler
never loads an entry an older one wrote.

The directory is ``TEGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/tegrad`` or
``~/.cache/tegrad``; ``TEGRAD_CACHE=0`` turns the cache off. A directory that cannot be
written is no error: the module is compiled, as without a cache.

>>> import tempfile, os
>>> os.environ["TEGRAD_CACHE_DIR"] = tempfile.mkdtemp()
>>> k = entry_key("define void @f() { ret void }", "x86_64-unknown-linux-gnu", "znver3", "")
>>> load(k) is None, store(k, b"object code"), load(k)
(True, True, b'object code')
>>> load(k, "program") is None  # another kind of entry: another file
True
>>> del os.environ["TEGRAD_CACHE_DIR"]
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import sys
import tempfile

import llvmlite
import llvmlite.binding as llvm

from tegrad.codegen.tuning import OBJECT_CACHE_BYTES

#: kind of entry -> (its file's suffix, its first line); a new format gets a new first
#: line: old entries then fail to check and are made again
KINDS = {"object": (".o", b"tegrad object code 2\n"),
         "program": (".program", b"tegrad program 1\n"),
         "routine": (".routine", b"tegrad routine 1\n")}

#: the first line of an object-code entry
MAGIC = KINDS["object"][1]

#: per kind, its hits and misses in this process (for tests and ``tegrad`` users who
#: wonder); ``STATS`` is the object code's
STATS_OF = {kind: {"hits": 0, "misses": 0, "writes": 0, "corrupt": 0} for kind in KINDS}
STATS = STATS_OF["object"]

#: the packages whose source :func:`source_fingerprint` covers (the compiler: IR,
#: differentiation, solver, code generation)
COMPILER_PACKAGES = ("tegrad", "tegrad.solver", "tegrad.codegen")


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


@functools.lru_cache(maxsize=None)
def _versions():
    # (read once: importlib.metadata takes 4 ms a call)
    try:
        version = importlib.metadata.version("tegrad")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return f"tegrad {version}; llvmlite {llvmlite.__version__}; LLVM " \
           f"{'.'.join(map(str, llvm.llvm_version_info))}"


def digest(parts, body=b""):
    """The hex SHA-256 of the strings ``parts`` (each ended by a NUL, so that no two
    lists of them run together alike) and then the bytes ``body``: an entry's key.

    >>> digest(["a", "b"]) != digest(["ab", ""])
    True
    """
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    h.update(body)
    return h.hexdigest()


def entry_key(ir_text, triple, cpu, features, optimised=True):
    """The key of the object code of ``ir_text`` for the target ``triple``/``cpu``/
    ``features`` (hex SHA-256)."""
    level = optimised if isinstance(optimised, str) else ("O3" if optimised else "O0")
    return digest((_versions(), triple, cpu, features, level), ir_text.encode())


@functools.lru_cache(maxsize=None)
def source_fingerprint():
    """The hex SHA-256 of the compiler's source: every ``.py`` file of
    :data:`COMPILER_PACKAGES`, by its path in its package and its contents (read once
    per process: 193 files, 1.5 MB, measured 14 ms). Python, llvmlite and LLVM versions are
    not in it (:func:`versions`).

    >>> len(source_fingerprint())
    64
    """
    h = hashlib.sha256()
    for package in COMPILER_PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in sorted(spec.submodule_search_locations or ()):
            for directory, subdirectories, files in os.walk(root):
                subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
                for name in sorted(f for f in files if f.endswith(".py")):
                    path = os.path.join(directory, name)
                    h.update(f"{package}/{os.path.relpath(path, root)}\0".encode())
                    with open(path, "rb") as f:
                        h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def versions():
    """The versions an entry depends on besides its key: Python's, tegrad's, llvmlite's
    and LLVM's."""
    return f"Python {sys.version}; {_versions()}"


def _path(directory, key, kind="object"):
    return directory / key[:2] / f"{key}{KINDS[kind][0]}"


def load(key, kind="object"):
    """The payload of the entry of ``kind`` (see :data:`KINDS`) stored under ``key``, or
    None (no cache, no entry, or an entry that does not check, which is removed)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = _path(directory, key, kind)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    magic = KINDS[kind][1]
    head = len(magic) + 64
    payload = data[head:]
    if not (data.startswith(magic) and data[len(magic):head]
            == hashlib.sha256(payload).hexdigest().encode() and payload):
        STATS_OF[kind]["corrupt"] += 1
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


def store(key, payload, kind="object"):
    """Store ``payload`` (bytes) as the entry of ``kind`` under ``key``; False when the
    directory cannot be written."""
    directory = cache_dir()
    if directory is None:
        return False
    path = _path(directory, key, kind)
    data = KINDS[kind][1] + hashlib.sha256(payload).hexdigest().encode() + payload
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
    STATS_OF[kind]["writes"] += 1
    _trim(directory)
    return True


def pack_objects(objects):
    """One payload holding the object files ``objects`` (a list of bytes): each its
    length (8 bytes, little-endian) and its bytes. A module compiled in parts
    (:mod:`tegrad.codegen.target.split`) is several.

    >>> unpack_objects(pack_objects([b"ab", b"", b"cde"]))
    [b'ab', b'', b'cde']
    """
    return b"".join(len(o).to_bytes(8, "little") + o for o in objects)


def unpack_objects(payload):
    """The object files of :func:`pack_objects`'s ``payload``; None when it does not
    parse (lengths past its end)."""
    objects, at = [], 0
    while at < len(payload):
        size = int.from_bytes(payload[at:at + 8], "little")
        if at + 8 + size > len(payload):
            return None
        objects.append(payload[at + 8:at + 8 + size])
        at += 8 + size
    return objects


def load_objects(key):
    """The object files stored under ``key`` (a list), or None; counted as a hit or a
    miss in :data:`STATS`."""
    data = load(key)
    objects = None if data is None else unpack_objects(data)
    STATS["misses" if objects is None else "hits"] += 1
    return objects


def store_objects(key, objects):
    """Store the object files ``objects`` (a list of bytes) under ``key``; False when
    the directory cannot be written."""
    return store(key, pack_objects(objects))


def engine_of(objects, target_machine):
    """An MCJIT engine (on ``target_machine``, which it owns) holding the object files
    ``objects``, linked together (their symbols resolve to each other's) and
    finalised."""
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine)
    for data in objects:
        engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    return engine


def loaded_engine(key, target_machine):
    """An MCJIT engine (on ``target_machine``, which it owns) holding the object code
    stored under ``key``, finalised; None when there is none."""
    objects = load_objects(key)
    return None if objects is None else engine_of(objects, target_machine)


def finalize_and_store(engine, key):
    """Finalise ``engine`` (compiling its module), storing the object code under
    ``key``."""
    made = []
    engine.set_object_cache(notify_func=lambda module, data: made.append(bytes(data)))
    engine.finalize_object()
    if made:
        store_objects(key, made[:1])


def _trim(directory, limit=None):
    """Remove the least recently used entries (of every kind) while the directory holds
    more than ``limit`` bytes (default :data:`OBJECT_CACHE_BYTES`)."""
    limit = OBJECT_CACHE_BYTES if limit is None else limit
    suffixes = {suffix for suffix, _ in KINDS.values()}
    entries = []
    try:
        for path in directory.glob("*/*"):
            if path.suffix not in suffixes or path.name.startswith("."):
                continue
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


__all__ = ["COMPILER_PACKAGES", "KINDS", "MAGIC", "STATS", "STATS_OF", "cache_dir", "digest",
           "entry_key", "finalize_and_store", "load", "loaded_engine", "source_fingerprint",
           "store", "versions"]
