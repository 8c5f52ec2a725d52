"""Random programs compiled with ``tegrad.codegen.build`` equal ``tg.evaluate``.

The programs (``tests/support/compiled_programs.py``) are stages of the random-program
generators of zero elimination's tests (affine, floor-division and modulo indices,
guarded reads), extended with what lowering must handle: every reducer (sum, prod, max,
min, a ``comm_reducer``) with ``init``, non-rectangular reduction domains (triangular
``where``, bounds that move with the outer axis, divisibility conditions that become
strides) and scatters with data-dependent targets. Each program is compiled with its
zero-eliminated gradient, whose domains are the non-rectangular ones zero elimination
produces.

Reads go through strided, dilated windows ``s*i + d*k - p`` (under their bounds) and
residues ``i // s``, ``i % s`` too; reductions run over one axis or two of independent
extents (non-square windows), and contraction stages sum a product of two such reads
(a matrix product, a convolution) for the product kernels. Half of the programs are
large (stages of 16-48 x 16-48, reductions up to 24 x 5 points), for the gemm and dot
kernels, the vector loops and the parallel loops, built with 1 or 2 threads;
``test_large_random_programs_take_the_product_vector_and_parallel_paths`` checks on
fixed seeds that such programs reach those paths. Programs are built with
``check_bounds=True`` when ``build`` has that option.

Each program costs a fraction of a second (differentiation and LLVM), so a CI run
draws ``TEGRAD_RANDOM_PROGRAMS`` programs (default 90); set it higher for a long run,
with a new seed each time::

    TEGRAD_RANDOM_PROGRAMS=2000 python -m pytest -q \
        tests/codegen/test_random_programs_compiled.py --hypothesis-seed=7
"""
import inspect
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen import build
from tegrad.codegen.llvm import emit as emit_module
from tegrad.codegen.target import jit
from tegrad.ir.errors import BufferTooLargeError

from support.compiled_programs import CURRENT, FIRST, build_program, programs, with_gradient
from support.random_programs import Seeded

#: programs per run (half of them large, 16-48 x 16-48 stages: about 1.5 s each with
#: their gradient); ``TEGRAD_RANDOM_PROGRAMS=N`` runs more locally
EXAMPLES = int(os.environ.get("TEGRAD_RANDOM_PROGRAMS", "90"))

#: ``build`` options: bounds checks where the compiler offers them
BUILD_OPTIONS = ({"check_bounds": True}
                 if "check_bounds" in inspect.signature(build).parameters else {})


def check_program(program, seed, **options):
    """Build the program with its gradient and compare with the evaluator; returns the
    compiled function."""
    inputs, outputs, feed = with_gradient(program, seed)
    try:
        want = tg.evaluate(outputs, feed)
    except BufferTooLargeError:
        # the oracle evaluates each stage's reduction domain at once; the gradient of a
        # max-like reducer read through a few distinct elements can need more than the
        # machine has (seed 39916801 of a 10,000-program run: 32 GB), and then there is
        # nothing to compare with
        reject()
    except tg.TegradError as e:
        # or more than the evaluator's memory limit (a fraction of the memory available:
        # seed 8401 of an 800-program run, a gradient's reduction over 777,728,000
        # points, 24.9 GB); any other refusal of a valid program is a failure
        if "memory limit" not in str(e):
            raise
        reject()
    f = build(inputs, outputs, threads=program[2], **BUILD_OPTIONS, **options)
    got = f(*[feed[t] for t in inputs])
    for t, g, w in zip(outputs, got, want):
        # sums of up to 120 terms, some reassociated (vector accumulators, the product
        # kernels): an error relative to the largest finite value (NaN and infinities
        # must match where they are; one NaN must not make the tolerance NaN)
        scale = 1.0 + float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * scale,
                                   err_msg=f"{t.name} (threads={program[2]}):\n"
                                           f"{tg.format(outputs)}")
    return f


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_compiled_random_program_and_gradient_equal_evaluator(program, seed):
    check_program(program, seed)


@settings(max_examples=15, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_emitted_one_function_per_statement_equal_evaluator(program, seed):
    """The emission of large kernels in parts (here every top-level statement a part)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emit_module, "PART_SIZE", 1)
        check_program(program, seed, name="in_parts")


@settings(max_examples=15, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_random_programs_compiled_in_llvm_parts_at_once_equal_evaluator(program, seed,
                                                                        parts):
    """A module compiled in parts on concurrent threads, linked into one engine (here
    every module, whatever its size, as if on two cores)."""
    modules, compiled = [], []
    compile_objects = jit.compile_objects
    # a cache of its own: an earlier example drawing the same program (with another
    # count of parts: the same module) left its machine code in the session's
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as cache:
        patch.setenv("TEGRAD_CACHE_DIR", cache)
        patch.setattr(emit_module, "PART_SIZE", 1)
        patch.setattr(jit, "SPLIT_CHARACTERS", 0)
        patch.setattr(jit, "PARTS_PER_CORE", parts)
        patch.setattr(jit, "usable_cores", lambda: modules.append(1) or 2)
        patch.setattr(jit, "compile_objects",
                      lambda texts, *a, **k: compiled.append(1) or compile_objects(texts, *a, **k))
        check_program(program, seed, name="in_llvm_parts")
    # every module compiled was compiled in parts (none was in the object cache)
    assert len(compiled) == len(modules)


#: seeds of large programs that, together, take every compiled path (a gemm kernel, a
#: product inside a fused nest, vector and parallel loops), with the generation of the
#: generator they were found with; seed 2's first-generation gradient reads a guarded
#: stage at a data-dependent index (its guard once failed to lower); seed 63 of the
#: current generation takes a gemm kernel, vector and parallel loops
PATH_SEEDS = ((2, FIRST), (8, FIRST), (9, FIRST), (63, CURRENT))


def test_large_random_programs_take_the_product_vector_and_parallel_paths():
    """Large programs of fixed seeds equal the evaluator, and between them their
    schedules use a product kernel, vector loops and parallel loops (so that the
    property tests' large programs exercise those paths)."""
    schedules = []
    for seed, generation in PATH_SEEDS:
        program = build_program(Seeded(np.random.default_rng([seed, 7])), large=True,
                                generation=generation)
        schedules.append(str(check_program((*program[:2], 2), seed).schedule))
    text = "\n".join(schedules)
    assert "gemm kernel" in text or "dot kernel" in text or "MatrixProduct" in text, text
    assert "vectorized" in text, text
    assert " parallel" in text, text
