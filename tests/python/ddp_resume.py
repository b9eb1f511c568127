"""A 3-rank Gloo DDP job through stoker.Loader, killed (SIGKILL) after step k, resumed from the
loader's state_dict on 2 ranks: every sample of the epoch is trained on exactly once."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from common import result

HERE = os.path.dirname(os.path.abspath(__file__))
K = 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, out, extra):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", **extra)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "ddp_rank.py"), out], env=env))
    return procs


with tempfile.TemporaryDirectory() as out:
    first = launch(3, out, {"STOP_AFTER": str(K), "RUN": "a"})
    deadline = time.time() + 240
    while not all(os.path.exists(os.path.join(out, f"stopped_{r}")) for r in range(3)):
        assert time.time() < deadline, "the 3-rank job did not reach step k"
        assert all(p.poll() is None for p in first), "a rank of the 3-rank job died"
        time.sleep(0.2)
    for p in first:
        p.send_signal(signal.SIGKILL)
        p.wait()
    second = launch(2, out, {"RESUME": "1", "RUN": "b"})
    for p in second:
        assert p.wait(timeout=400) == 0, "a rank of the resumed 2-rank job failed"

    seen = []
    for run, world in (("a", 3), ("b", 2)):
        for r in range(world):
            with open(os.path.join(out, f"indices_{run}_{r}.txt")) as f:
                for line in f:
                    seen.extend(int(v) for v in line.split())
    first_run = sum(len(open(os.path.join(out, f"indices_a_{r}.txt")).read().split()) for r in range(3))
    assert first_run == K * 50 * 3, first_run
    assert len(seen) == 60000, f"{len(seen)} samples trained on, the epoch has 60000"
    assert sorted(seen) == list(range(60000)), "a sample was repeated or skipped"
    result(first_run=first_run, resumed=len(seen) - first_run, samples=len(seen))
