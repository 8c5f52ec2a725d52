"""Every tuning constant of code generation: each performance choice the compile pipeline
makes by a number, with its unit and the measurement (or, where none was recorded, the
reasoning) behind it, grouped by the stage that reads it: lower, schedule, kernels,
llvm, runtime.

A choice that depends on the machine is a function of the
:class:`~tegrad.codegen.target.Target` code is generated for (:func:`gemm_register_block`
reads its vector registers), never a read of the host. Facts the generated code is
correct only with (an alignment declared to LLVM, the thread pool's 64-bit claim word,
the C ABI's limits, numerical constants) are not tuning and stay where they are used;
``tests/codegen/test_tuning.py`` keeps the two apart.

Unless a comment says otherwise, figures were measured on the project's 2-core AMD EPYC
(Zen 3, AVX2, 256-bit vectors) or the earlier Zen 4 one (AVX-512), both shared and loaded.

>>> from tegrad.codegen.target import Target
>>> gemm_register_block(Target.parse("aarch64-linux-gnu"), "float32")
(4, 8, 8)
"""
from __future__ import annotations

from tegrad.reference.memory import physical_memory

# ---------------------------------------------------------------------------- lower ----

#: unit: iterations
#: a stage computed once whose loops iterate fewer times runs as loops: they take about a
#: millisecond, less than compiling its products (tenths of a second) is worth
MIN_PRODUCT_ITERATIONS = 1 << 20

#: unit: flops per iteration
#: what one iteration of a stage's loops costs, in floating-point operations of the gemm
#: kernel (measured on conv2d gradients: 30 to 60)
LOOP_COST = 32

#: unit: ratio
#: one product may do this much more work than the residue classes of its stage and
#: still be chosen: it saves their temps, copies and calls
MAX_WHOLE_EXCESS = 1.25

#: unit: outputs per call
#: a product of fewer outputs per call than this (a dot product: one) runs as loops,
#: whose vector accumulators read both operands once; the micro-kernel would fill one
#: lane of its register block and pack B sixteen times over (a 524,288-term dot product:
#: 3.2 ms against numpy's 0.1). So does a product of one row per call (a depthwise
#: convolution's channel: each element of B is used once, and the micro-kernel would
#: fill one of its rows after packing B; 8x64x32x32 fwd+grad: 6.3 -> 4.4 ms) or of one
#: column (a global average pool's sum with ones: 32x256x8x8 fwd+grad 0.37 -> 0.29 ms)
MIN_PRODUCT_OUTPUTS = 16

#: unit: ratio
#: a plan over a transposed output is taken when its calls are this many times larger
#: (``m * n``): a narrow column axis (a strided convolution's weight gradient, columns of
#: its window) leaves the kernel's vector registers mostly empty (that gradient: calls of
#: 32x256 instead of 64 calls of 32x4)
TRANSPOSE_GAIN = 4

#: unit: columns
#: a plan whose calls have at least this many columns is kept as it is: its vector
#: registers are full, and a transposed plan would add a copy of the output (a
#: convolution over a batch of 32 images with 10 filters took its 676 output pixels per
#: image as rows and the 32 * 676 as columns, then copied the result back, strided)
WIDE_COLUMNS = 64

#: unit: rows
#: the most rows an offset table of a plan may have (a bound on compile-time work and on
#: the table's constant data; not measured)
MAX_TABLE_ROWS = 1 << 16

#: unit: elements per element
#: the most elements the ones of a sum of one read taken as a product with ones may
#: have, in units of the output's and the read tensor's elements together (a bound on the
#: ones' memory and work; not measured)
MAX_ONES_FACTOR = 16

#: unit: points
#: the most points (output-axis values times reduction-variable values) enumerated to
#: check that rewritten reduction bounds are equivalent (a bound on compile time; not
#: measured)
MAX_CHECKED_POINTS = 1 << 16

#: unit: residue classes
#: the most residue classes a stage is split into (each becomes a product with its own
#: temp and copy: conv2d's stride-2 gradients need 4; not measured)
MAX_RESIDUE_CLASSES = 16

#: unit: statements
#: the most slices a scatter into constant slices is split into (each slice becomes a
#: loop nest of its own, placed where its values are ready: a GRU of 16 steps has 16;
#: a bound on the statements and compile time a split adds; not measured)
MAX_SCATTER_SLICES = 64

#: unit: expression nodes
#: the largest stored value (expression nodes per element) a temporary may have to be
#: computed again before its late readers instead of kept alive (a GELU's output is 10
#: nodes, a layer norm's 12; the transformer block's step computes both again for about
#: 1% of its time and 1.2 MB less workspace); a bound on the time a copy adds
REMATERIALISED_NODES = 48

# ------------------------------------------------------------------------- schedule ----

#: unit: expression nodes
#: the least work (expression nodes evaluated, see
#: :func:`~tegrad.codegen.schedule.parallel.loop_work`) of a loop run in
#: parallel. ``python benchmarks/threads.py`` measures about 15-30 ps of serial time per
#: unit of work (elementwise loops and row sums, vectorised) and a fork-join between
#: spinning threads under a microsecond: from 2**18 units (4-6 us) two threads save a
#: microsecond, at 2**20 (15-20 us) about five (1.3x). But a worker that other
#: processes' threads take the core from mid-range is back only after a time slice:
#: with PyTorch's spinning OpenMP threads alternating on the same two cores, 10-20 us
#: kernels took 0.3-0.5 ms (median over calls). Loops below 2**20 units run serially,
#: where that risk costs more than parallelism can save.
MIN_PARALLEL_WORK = 1 << 20

#: unit: iterations per thread
#: a parallel loop whose trip count is not a multiple of the thread count is fused with
#: the loop inside it until it has at least this many iterations per thread, so the
#: threads idle in its last round waste at most about a quarter of it (reasoning; not
#: measured)
COLLAPSE_TRIPS_PER_THREAD = 4

#: unit: statements
#: a loop is fused with loops at most this many statements after it (keeps fusion
#: linear in the number of stages: a 2,000-stage chain scanned 2 million pairs)
FUSION_WINDOW = 256

#: unit: iterations
#: the most iterations of a loop marked ``unrolled``: the backend copies its body this
#: many times (a schedule refuses to mark a longer loop; split it first). A bound on code
#: size; not measured
UNROLL_LIMIT = 64

#: unit: iterations
#: reduction loops with at most this many iterations are unrolled, never innermost
#: (a 3x3 window's taps; not measured)
TINY_TRIP = 4

#: unit: elements
#: scalar accumulators are expanded to one element per iteration up to this many (a
#: bound on the expanded buffer; not measured)
EXPANSION_LIMIT = 4096

#: unit: points
#: at most this many values of an enclosing loop are tried to bound a trip count (a bound
#: on compile time; not measured)
POINTS_LIMIT = 1024

#: unit: statements
#: unrolling stops where the statements emitted for a loop would exceed this many
#: (compile time of small programs)
UNROLLED_SIZE = 32

#: unit: expression nodes per statement
#: a statement counts as one more for every this many distinct expression nodes it holds
#: (a statement 10,000 operations deep is not copied per iteration: a 10,000-deep select
#: was emitted once per iteration of tiny loops, its build 204 -> 80 s)
NODES_PER_STATEMENT = 64

#: unit: iterations
#: the largest divisor whose inner loop is unrolled; inner loops of larger divisors stay
#: loops (a flatten's copy: three loops, the innermost contiguous and vectorised, where
#: every element was divided twice)
MAX_DIVISOR = 4

#: unit: vectors
#: how many vectors of accumulators a reduction keeps (at most): several hide the
#: latency of each vector's combination (not measured)
INTERLEAVE = 4

#: unit: vector steps per accumulator
#: a reduction gets vector accumulators only when each vector of them is updated at least
#: this many times (a shorter loop keeps its scalar accumulator: the combination across
#: lanes after the loop would cost about what the vector steps save; reasoning, not
#: measured)
VECTOR_STEPS_PER_ACCUMULATOR = 2

#: unit: iterations
#: the smallest tile side tried (tiles are the vector lanes, halved down to this;
#: transpose 1024x1024 fwd in tiles, 2 threads: 3.7-4.2 -> 1.0-1.2 ms)
MIN_TILE = 4

#: unit: tap loops
#: windows of more tap loops than this keep their order (the directions tried grow as
#: 2**taps; a bound on compile time, not measured)
MAX_TAPS = 4

#: unit: tap tuples
#: windows of more tap tuples than this keep their order (pairs are compared; a bound on
#: compile time, not measured)
MAX_TUPLES = 64

#: unit: elements
#: the most elements of a local array of tap-free parts of a window's update (a bound on
#: its stack use; not measured)
ROW_LIMIT = 4096

#: unit: iterations
#: no loop of fewer iterations is marked ``vectorized`` (automatically or by request):
#: forced through LLVM's loop vectoriser, a loop of 2 often fails its legality test (a
#: value of the loop used after it; 6 of the 10 such loops of the operator table's
#: programs, none of the 6 loops of 3); two iterations run as straight-line code anyway
MIN_VECTOR_TRIP = 3

#: unit: expression nodes
#: the automatic schedule marks no loop whose body holds more distinct nodes
#: ``vectorized``: a marked loop is forced through LLVM's loop vectoriser. Measured (CPU time to optimise and
#: compile a 64 x 256 stage, forced / vectorisation off): a sum of K selects between
#: loads, 155 nodes 0.14 / 0.04 s, 605 nodes 0.37 / 0.13 s, 1,205 nodes 0.83 / 0.25 s,
#: 2,405 nodes 1.80 / 0.37 s; a sum of K tanh (inline polynomials, ~10 instructions a
#: node), 565 nodes 1.03 / 0.99 s, 1,125 nodes 2.50 / 3.04 s: forcing costs at most a
#: quarter of a second below this bound
VECTOR_BODY_NODES = 600

# -------------------------------------------------------------------------- kernels ----

#: unit: flops
#: the default least work that pays for one more thread in a product kernel: 2**21,
#: 10-15 us of one core (a fork-join costs about a microsecond, but a worker descheduled
#: mid-range by another process's threads costs a time slice: see MIN_PARALLEL_WORK)
MIN_FLOPS_PER_THREAD = 1 << 21

#: unit: rows
#: the most rows of the gemm's register block: more than 8 gains little (AVX-512: 8 rows
#: fit its 32 registers, AVX2: 6 its 16)
GEMM_MAX_ROWS = 8

#: unit: vectors
#: the columns of the gemm's register block, in vectors: its accumulators take this many
#: registers a row, plus as many of B and one broadcast of A
GEMM_COLUMN_VECTORS = 2

#: unit: elements
#: the gemm's reduction block (``kc``): a BLIS-style choice, a row of packed B per
#: reduction step kept in the L1 cache with A's block (not measured)
GEMM_KC = 256

#: unit: bytes
#: the packed block of B (``kc x nc``): within the L2 cache (512 KiB a core on Zen 3) with
#: room for A and C (BLIS-style reasoning; not measured)
GEMM_PACKED_B_BYTES = 256 * 1024


def gemm_register_block(target, dtype):
    """``(vl, mr, nr)`` of the gemm's register block on ``target`` (a
    :class:`~tegrad.codegen.target.Target`) for elements of ``dtype`` (unit: vector lanes,
    rows, columns): :data:`GEMM_COLUMN_VECTORS` vectors of columns and as many rows (at
    most :data:`GEMM_MAX_ROWS`) as the target's vector registers hold, besides a row's
    vectors of B and the broadcast of A.

    >>> from tegrad.codegen.target import Target
    >>> gemm_register_block(Target.parse("x86_64-linux-gnu", cpu="haswell"), "float64")
    (4, 6, 8)
    """
    vl = target.lanes(dtype)
    rest = target.vector_registers - GEMM_COLUMN_VECTORS - 1
    return vl, max(1, min(GEMM_MAX_ROWS, rest // GEMM_COLUMN_VECTORS)), GEMM_COLUMN_VECTORS * vl


#: unit: ratio
#: the least share of a run's vector lanes holding terms for the dot kernel to be chosen
#: (26 of 32 for a run of 26 in two 16-lane vectors: 0.81)
MIN_LANE_FILL = 0.75

#: unit: vector steps
#: the least vector steps (rows times vectors per run) of each output's sum for the dot
#: kernel to be chosen: the sum across lanes at the end costs about one step per output
MIN_VECTOR_STEPS = 32

#: unit: ratio
#: what a load costs against a fused multiply-add, in choosing the dot kernel's block
#: shape (conv -> dense -> cross-entropy step, 2 threads, with the dot kernel: logits
#: 0.16 -> 0.025 ms, conv weight gradient 0.48 -> 0.075 ms)
LOAD_WEIGHT = 0.5

#: unit: rows
#: the most rows of a dot-kernel block tried (the registers bound them first on AVX2)
DOT_MAX_ROWS = 8

#: unit: columns
#: the most columns of a dot-kernel block tried
DOT_MAX_COLUMNS = 12

#: unit: vectors
#: the dot kernel's runs of at most this many whole vectors are unrolled (not measured)
DOT_UNROLL_VECTORS = 4

#: unit: spin checks
#: checks of its word an idle pool worker makes before it sleeps (each with a pause hint)
SPIN_ITERATIONS = 1 << 14

#: unit: spin checks
#: the caller's checks of the pool's pending count before it sleeps
CALLER_SPIN_ITERATIONS = 1 << 16

#: unit: spin checks
#: a spinning pool thread yields its core (``sched_yield``) once per this many checks: a
#: worker the caller waits for may be runnable on the caller's own core while another
#: process's thread spins on the other (the take forward's median alternated with
#: PyTorch: 0.50 -> 0.06-0.09 ms)
YIELD_EVERY = 1 << 7

#: unit: chunks per thread
#: chunks per thread a fork-join's tasks are cut into: enough that a thread slowed by
#: another process's thread leaves work for the others, few enough that a chunk's own
#: set-up (a gemm's packing) stays small next to its work
CHUNKS_PER_THREAD = 8

# ----------------------------------------------------------------------------- llvm ----

#: unit: expression nodes
#: a kernel larger than this (statements plus distinct expression nodes) is emitted as
#: one function per top-level statement, called in turn, each taking the buffers it
#: uses (a 1,000-stage program and its gradient: 13 s of LLVM optimisation as one
#: function, 3.4-4.6 s in parts of 1,000-4,000; the 6-layer CNN step is 1,800)
PART_SIZE = 2000

#: unit: bytes
#: local buffers larger than this live in storage the runtime owns (passed in the buffer
#: array) instead of on the stack (a bound well under a thread's stack; not measured)
STACK_LIMIT_BYTES = 64 * 1024

#: unit: bytes
#: a buffer of at least this size may share the kernel's storage with buffers whose
#: lifetimes are disjoint from its own; smaller ones keep a place of their own (sharing
#: one would save less than a 4 KiB page, and each pair sharing memory puts the
#: statements using them in different functions; reasoning, not measured)
SHARED_MIN_BYTES = 4096

#: unit: pairs
#: up to this many (output, argument) pairs, the Python entry checks each overlap by code
#: of its own (a compare pair and a branch); more are checked by two nested loops, over
#: the outputs and every argument (code of constant size: a training step with 68 outputs
#: and 135 arguments has 6,900 pairs, unrolled 3.5 MB of IR and about 54 s of LLVM; an
#: 8-layer transformer step's entry was 693 KB of IR as a table of pairs, 7 KB as loops)
UNROLLED_OVERLAP_PAIRS = 256

#: unit: bytes
#: the most the on-disk cache of compiled machine code keeps (least recently used
#: entries dropped first): the transformer's training step is about 0.5 MB of object
#: code, so a thousand programs of that size (reasoning, not measured)
OBJECT_CACHE_BYTES = 512 * 2**20

#: unit: LLVM instructions
#: a loop whose body has more LLVM instructions than this is not given to LLVM's loop
#: vectoriser, whose time grows with the square of the body (a 4,000-instruction body:
#: 6.7 s of a 6.8 s compile, 0.4 s at 1,000)
VECTORIZE_LIMIT = 1000

#: unit: lanes
#: vectorised loops of at least this many lanes also get a vectorised epilogue (LLVM's
#: default: 16; rows of 28 run as 3 x 8 + 4 lanes: max-pool dilation-2 gradient 165 ->
#: 144 us on two threads)
EPILOGUE_MIN_LANES = 8

#: unit: flag
#: let LLVM use 512-bit vectors where the host has them (it prefers 256-bit ones
#: otherwise)
WIDE_VECTORS = True

#: unit: orders
#: the most orders of the buffers :func:`~tegrad.codegen.llvm.kernel_buffers.plan_storage`
#: places before keeping the smallest plan: 16 orders reach the peak of the bytes alive
#: together in LeNet-5's, a ResNet block's, a transformer block's, a GRU's and a TCN's
#: training steps but LeNet-5's (6.50 MB for 6.45 MB), and placing cost 30 ms at most
#: (the GRU's 150 buffers)
PLACEMENT_TRIES = 16

#: unit: ratio
#: a placement whose block is within this fraction of the peak of the bytes alive
#: together (a bound no placement beats) ends
#: the search. Chains of temporaries written in place make the peak unreachable in
#: transformer steps (the first order ends 64 kB above it, 0.15% of an 8-layer step's
#: 43.6 MB, and no later order does better) so every order was tried: 36 placements of
#: 311 buffers, 1.5 s of the 8-layer step's build. With 1% the plans of the five zoo
#: models and the 1- and 8-layer transformers are those of the full search, and each
#: is found by the first order
PLACEMENT_SLACK = 0.01

#: unit: characters
#: a kernel's module of at least this much IR text is compiled in parts on every usable
#: core (:mod:`tegrad.codegen.target.split`); a smaller one compiles in under 0.1 s,
#: where the parts' own set-up would take most of the gain (reasoning, not measured)
SPLIT_CHARACTERS = 100_000

#: unit: parts per core
#: the parts a module compiled in parts is cut into, per usable core: more parts share
#: the cores more evenly. A 1-layer transformer step's module (453,000 characters), 2
#: cores of Zen 3, best of 3: whole 1.25 s; 2 parts 0.73, 4 parts 0.76, 8 parts 0.67
PARTS_PER_CORE = 4

#: unit: seconds
#: the interpreter's switch interval while the JIT's background thread compiles shared
#: routines: it waits for the interpreter's lock between its calls into LLVM (about 30
#: a routine) while the main thread lowers the program, up to the switch interval each
#: (5 ms by default). A 1-layer transformer step's first build, its products' routines
#: requested before lowering, median of 4 on Zen 3: 3.37 s at 5 ms, 2.88 s at 0.2 ms
BACKGROUND_SWITCH_INTERVAL = 0.0002

# -------------------------------------------------------------------------- runtime ----

#: unit: bytes
#: the memory one LLVM execution engine holds for a small kernel (its target machine,
#: module and code; measured with mallinfo2 over 20 engines)
ENGINE_BYTES = 800 * 1024

#: unit: bytes per character
#: and per character of the kernel's emitted IR text (a dense gradient's 45 kB: +0.3 MB)
IR_BYTES_PER_CHARACTER = 8

#: unit: programs
#: how many compiled programs the cache keeps (least recently used ones are dropped)
CACHE_SIZE = 256

#: unit: bytes
#: the bytes the cached programs may hold (temporaries and code, as Executable.nbytes
#: estimates): 1 GiB, or an eighth of the physical memory on a smaller machine. A
#: program dropped costs a compile (0.1 s to a few s) when built again; held memory is
#: lost to everything else for the process's life: 256 small programs (~1 MB of code
#: each) stay within it, programs with temporaries of hundreds of MB are a handful
CACHE_BYTES = min(2**30, (physical_memory() or 2**33) // 8)

#: unit: bytes
#: a ``tegrad.torch`` operator's outputs up to this many bytes get a template of their own
#: size, whose empty_like costs 0.2 us less than an expanded one's (2.8 against 3.0 us, a
#: 2x4 float32; under 5% of the time a kernel takes to write more)
DENSE_TEMPLATE_BYTES = 16 * 1024
