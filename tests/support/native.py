"""Native code, read and run by hand: the export tests' ELF readers, a C driver that calls
an exported entry point, and the aligned workspace an entry point requires.
"""
import pathlib
import struct
import subprocess

import numpy as np


def elf_machine_and_symbols(path, *, undefined=False):
    """``(e_machine, {global symbol names})`` of a 64-bit little-endian ELF file: the
    symbols it defines, or with ``undefined`` those it needs."""
    data = pathlib.Path(path).read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "64-bit little-endian ELF"
    machine = struct.unpack_from("<H", data, 18)[0]
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize)
                for k in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strtab_offset = sections[link][4]
        for s in range(offset, offset + size, entsize):
            name_at, info, _, shndx = struct.unpack_from("<IBBH", data, s)
            if info >> 4 == 1 and (shndx == 0) == undefined:  # STB_GLOBAL
                end = data.index(b"\0", strtab_offset + name_at)
                names.add(data[strtab_offset + name_at:end].decode())
    return machine, names


def elf_needed_libraries(path):
    """The DT_NEEDED entries (shared libraries a 64-bit little-endian ELF file loads)."""
    data = pathlib.Path(path).read_bytes()
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize)
                for k in range(shnum)]
    needed = []
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strings = sections[link][4]
        for entry in range(offset, offset + size, 16):
            tag, value = struct.unpack_from("<qQ", data, entry)
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", strings + value)
                needed.append(data[strings + value:end].decode())
    return needed


def driver_source(entry, header):
    """A C program running ``entry`` once: input ``k`` read from ``in{k}.bin``, output ``k``
    written to ``out{k}.bin``, in the folder given as its argument; prints the status."""
    inputs = [p for p in entry.args if p.role == "input"]
    outputs = [p for p in entry.args if p.role == "output"]
    lines = ["#include <stdio.h>", "#include <stdlib.h>", f'#include "{header}"',
             "static void *buffer(size_t n) { void *p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);"
             " if (!p) exit(3); return p; }",
             "static void io(const char *dir, const char *name, void *p, size_t n, int out) {",
             "  char path[4096]; snprintf(path, sizeof path, \"%s/%s\", dir, name);",
             "  FILE *f = fopen(path, out ? \"wb\" : \"rb\"); if (!f) exit(4);",
             "  size_t done = out ? fwrite(p, 1, n, f) : fread(p, 1, n, f);",
             "  if (done != n) exit(5); fclose(f); }",
             "int main(int argc, char **argv) {",
             "  if (argc < 2) return 2;"]
    for k, p in enumerate(inputs + outputs):
        lines.append(f"  void *a{k} = buffer({p.nbytes});")
    for k, p in enumerate(inputs):
        lines.append(f'  io(argv[1], "in{k}.bin", a{k}, {p.nbytes}, 0);')
    lines.append(f"  void *workspace = buffer({entry.workspace_bytes});")
    call = ", ".join([f"a{k}" for k in range(len(inputs) + len(outputs))] + ["workspace"])
    lines.append(f"  int status = {entry.name}({call});")
    lines.append(f'  printf("%d %s\\n", status, {entry.name}_error_string(status));')
    for k, p in enumerate(outputs):
        lines.append(f'  if (status == 0) io(argv[1], "out{k}.bin", a{len(inputs) + k}, '
                     f'{p.nbytes}, 1);')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def run_driver(compiler, library, entry, arrays, folder, runner=()):
    """Compile the C driver of ``entry`` with ``compiler`` against the exported ``library``
    in ``folder``, run it (under ``runner``, e.g. qemu, statically linked) on ``arrays``;
    ``(status, the line it printed, the outputs or None)``."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "driver.c"
    source.write_text(driver_source(entry, library.header_path))
    exe = folder / "driver"
    flags = ["-static"] if runner else []
    done = subprocess.run([compiler, "-std=c11", "-O1", str(source), str(library.object_path),
                           "-lm", *flags, "-o", str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for k, a in enumerate(arrays):
        np.ascontiguousarray(a).tofile(folder / f"in{k}.bin")
    run = subprocess.run([*runner, str(exe), str(folder)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    status = int(run.stdout.split()[0])
    outputs = [p for p in entry.args if p.role == "output"]
    values = [np.fromfile(folder / f"out{k}.bin", dtype=p.dtype).reshape(p.shape)
              for k, p in enumerate(outputs)] if status == 0 else None
    return status, run.stdout.strip(), values


def aligned_workspace(nbytes):
    """``nbytes`` zero bytes at a 64-byte aligned address (what an entry point requires)."""
    raw = np.zeros(nbytes + 64, np.uint8)
    return raw[-raw.ctypes.data % 64:][:nbytes]
