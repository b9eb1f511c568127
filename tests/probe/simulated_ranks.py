"""Simulated ranks for looking at the Monitor with a big job: N connections, each sending one
rank's telemetry record every --period-ms (the core's JSON lines), one rank starved of data.

    python3 tests/probe/simulated_ranks.py --publish 127.0.0.1:29650 --ranks 256 --slow 137 --seconds 60
"""

import argparse
import json
import os
import random
import socket
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--publish", required=True, help="HOST:PORT of a listening Monitor")
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--period-ms", type=int, default=100)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--slow", type=int, default=137, help="this rank waits for data most of its iterations")
    a = p.parse_args()
    host, port = a.publish.rsplit(":", 1)
    socks = [socket.create_connection((host or "127.0.0.1", int(port))) for _ in range(a.ranks)]
    rng = random.Random(0)
    start = time.time()
    step = 0
    while time.time() - start < a.seconds:
        now = time.time()
        for r, s in enumerate(socks):
            slow = r == a.slow
            wait = (28 if slow else 0.4) + rng.uniform(-0.2, 0.2)
            record = {
                "time": now, "host": f"node-{r // 8:02d}", "pid": 10000 + r, "rank": r, "local_rank": r % 8,
                "world_size": a.ranks, "device": f"cuda:{r % 8}", "epoch": 0, "step": step, "steps_total": 5000,
                "samples_per_s": (1100 if slow else 2400) * (1 + rng.uniform(-0.03, 0.03)),
                "data_wait_ms": wait, "step_ms": 20 + rng.uniform(-0.5, 0.5), "mode": "streaming",
                "source": "stoker", "prefetch_depth": 8, "ready": 0 if slow else 6,
                "mem_used": int(61e9 + rng.uniform(0, 1e9)), "mem_total": 80 * 2**30,
                "stages_ms": {"read": 0.3, "decode": 40 if slow else 9, "transform": 3, "collate": 0.5, "copy": 0.4},
            }
            try:
                s.send((json.dumps(record) + "\n").encode(), socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass
        step += 1
        time.sleep(max(0.0, a.period_ms / 1000 - (time.time() - now)))


if __name__ == "__main__":
    main()
