"""Linking an exported object into the target's shared library with a C compiler driver.

The host uses ``cc``; another target uses ``<triple>-gcc`` (with or without the vendor
field: ``aarch64-unknown-linux-gnu-gcc`` or Debian's ``aarch64-linux-gnu-gcc``; Debian's
``arm-linux-gnueabihf-gcc`` for armv7; MinGW's ``x86_64-w64-mingw32-gcc`` for Windows).

>>> from tegrad.codegen.export.targets import target_spec
>>> linker_candidates(target_spec("armv7-linux-gnueabihf"))
['armv7-unknown-linux-gnueabihf-gcc', 'armv7-linux-gnueabihf-gcc', 'arm-linux-gnueabihf-gcc']

The library links against libm only (and pthreads if the object calls it);
``--no-undefined`` makes the link fail if the object needs anything else.
"""
from __future__ import annotations

import shutil
import subprocess

from tegrad.codegen.export.errors import ExportError


def linker_candidates(spec):
    """Compiler drivers that can link for ``spec``, in order of preference."""
    if spec.is_host:
        return ["cc", "gcc", "clang"]
    parts = spec.triple.split("-")
    names = [f"{spec.triple}-gcc"]
    if len(parts) >= 3 and parts[1] in ("unknown", "pc"):
        names.append("-".join(parts[:1] + parts[2:]) + "-gcc")
    if spec.arch.startswith("armv") and len(parts) >= 3:  # Debian: arm-linux-gnueabihf-gcc
        names.append("-".join(["arm"] + parts[2:]) + "-gcc")
    if spec.os == "windows":
        names.append(f"{spec.arch}-w64-mingw32-gcc")
    return names


def find_linker(spec, linker=None):
    """The path of the first available driver (``linker`` if given), or None."""
    if linker is not None:
        found = shutil.which(linker)
        if found is None:
            raise ExportError(f"linker {linker!r} not found on PATH")
        return found
    for name in linker_candidates(spec):
        found = shutil.which(name)
        if found:
            return found
    return None


def needs_pthreads(undefined):
    """Whether an object needing the symbols ``undefined`` links with ``-lpthread`` (glibc
    before 2.34 keeps the pthread functions there; the thread pool calls them).

    >>> needs_pthreads(["expf", "pthread_create"]), needs_pthreads(["expf"])
    (True, False)
    """
    return any(name.startswith("pthread_") for name in undefined)


def link_command(driver, spec, object_path, library_path, undefined):
    """The command line that links ``object_path`` into ``library_path``."""
    command = [driver, "-shared", "-o", str(library_path), str(object_path), "-lm"]
    if needs_pthreads(undefined):
        command.append("-lpthread")
    if spec.object_format == "ELF":
        command.append("-Wl,--no-undefined")
    return command


def link_shared_library(spec, object_path, library_path, undefined, *, linker=None):
    """Link; return ``(library_path or None, message)``: the message says what was run,
    or which drivers were missing and how to link by hand."""
    if spec.object_format == "Wasm":
        return None, (f"{object_path} is a WebAssembly object; link it into your module "
                      f"with wasm-ld (no shared library is made for wasm)")
    driver = find_linker(spec, linker)
    if driver is None:
        tried = ", ".join(linker_candidates(spec))
        example = linker_candidates(spec)[-1]
        needs, flags = ("libc, libm and libpthread", "-lm -lpthread") \
            if needs_pthreads(undefined) else ("libc and libm", "-lm")
        return None, (f"no linker for {spec.triple} found (tried {tried}); the object "
                      f"{object_path} needs only {needs}: link it with a C compiler "
                      f"for that target, e.g. `{example} -shared -o {library_path} "
                      f"{object_path} {flags}`, or add it to your program's link line with "
                      f"{flags}")
    command = link_command(driver, spec, object_path, library_path, undefined)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ExportError(f"linking {library_path} failed: {' '.join(command)}\n"
                          f"{done.stderr.strip()}")
    return library_path, f"linked {library_path}: {' '.join(command)}"
