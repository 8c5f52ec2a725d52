"""The hand-written LLVM kernel function of the export tests (``tests/support/export_sample.py``)
does what its loop-IR kernel says: run through llvmlite's JIT, against numpy, and its
checks report their codes, so the export tests rest on a correct kernel.
"""
import ctypes

import llvmlite.binding as llvm
import numpy as np

from support.export_sample import CHECKS, N, reference, sample_inputs, sample_kernel, sample_module


def _jit_run(kernel_module, arrays):
    """Run the kernel function in this process through llvmlite's JIT."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    ref = llvm.parse_assembly(str(kernel_module.module))
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(ref, machine)
    engine.finalize_object()
    address = engine.get_function_address(kernel_module.function)
    fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(address)
    pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    return fn(pointers), engine


def test_hand_written_kernel_matches_numpy():
    kernel = sample_kernel()
    x, idx, w, b, d = sample_inputs()
    y, q, t = np.zeros(N, np.float32), np.zeros(N, np.int32), np.zeros(N, np.float32)
    status, _ = _jit_run(sample_module(kernel),
                         [x, idx, np.array(w), np.array(b), np.array(d), y, q, t])
    want_y, want_q = reference(x, idx, w, b, d)
    assert status == 0
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(q, want_q)


def test_hand_written_kernel_reports_its_checks():
    kernel = sample_kernel()
    x, idx, w, b, d = sample_inputs()
    outs = [np.zeros(N, np.float32), np.zeros(N, np.int32), np.zeros(N, np.float32)]
    bad = idx.copy()
    bad[5] = N
    status, _ = _jit_run(sample_module(kernel),
                         [x, bad, np.array(w), np.array(b), np.array(d)] + outs)
    assert CHECKS[status] == ("index_out_of_range", "idx")
    status, _ = _jit_run(sample_module(kernel),
                         [x, idx, np.array(w), np.array(b), np.array(0, np.int32)] + outs)
    assert CHECKS[status] == ("division_by_zero", "d")
