"""What several test files share, imported as ``support`` (``tests/conftest.py`` puts
``tests/`` on the import path and has pytest rewrite the asserts of this package as it
does a test file's).

- ``random_programs``: the random-program generators of zero elimination's tests;
- ``compiled_programs``: those programs extended for the compiler (every reducer and
  domain, contractions, scatters), with their gradients;
- ``programs``: fixed programs (a matmul, an MLP's gradient), an operator-table entry with
  its gradient, the fill a lowered scatter adds to ``tg.cost``'s count;
- ``compare``: arrays for placeholders, and a build compared with ``tg.evaluate``;
- ``export_sample``: a hand-built kernel and its hand-written LLVM function;
- ``native``: ELF readers, a C driver for an exported entry point, an aligned workspace;
- ``training``: the models, data and optimizer cases trained against ``torch.optim``;
- ``ddp_worker``: one process of the DistributedDataParallel test (also a script).

The package imports none of them itself: a test file pays only for what it imports
(``training`` and ``ddp_worker`` import PyTorch).
"""
