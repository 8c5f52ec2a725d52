"""A model holding a tegrad operator trains under DistributedDataParallel (gloo, two
processes on 127.0.0.1): each process's averaged gradients equal one process's on the
whole batch."""
import os
import socket
import subprocess
import sys

import torch

from support import ddp_worker

#: the worker, run as a script in each process
WORKER = ddp_worker.__file__


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_gradients_equal_one_process_on_the_whole_batch(tmp_path):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE="2", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    prefix = str(tmp_path / "grads")
    procs = [subprocess.Popen([sys.executable, str(WORKER), prefix],
                              env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(2)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)

    x, target = ddp_worker.batch()
    want = ddp_worker.gradients(ddp_worker.Model(ddp_worker.BATCH), x, target)
    for rank in range(2):
        got = torch.load(f"{prefix}{rank}.pt")
        assert sorted(got) == sorted(want) == ["out.bias", "out.weight", "w"]
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-12, atol=1e-12)
