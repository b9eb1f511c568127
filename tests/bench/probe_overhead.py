"""The probe's cost to a training loop: a step of 5 ms (busy CPU work, as a GPU launch loop
would be) over batches from an ordinary DataLoader, with and without stoker_probe.watch(),
in interleaved blocks so that machine drift cancels. Publishes to a live `stoker monitor`
when --stoker is given (else to file:/dev/null). Prints one line per configuration and the
overhead per step in microseconds and percent; the goal is < 2 % of a 5 ms step.

    PYTHONPATH=python python3 tests/bench/probe_overhead.py --stoker build/bin/stoker
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import stoker_probe  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def block(loader, steps, step_s, watch_args):
    """Seconds per iteration over `steps` iterations (loader restarted as needed)."""
    done = 0
    start = time.perf_counter()
    while done < steps:
        it = stoker_probe.watch(loader, **watch_args) if watch_args else loader
        for batch in it:
            busy(step_s)
            done += 1
            if done == steps:
                break
    return (time.perf_counter() - start) / steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stoker", help="the stoker CLI: publish to a live `stoker monitor`")
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--blocks", type=int, default=30)
    p.add_argument("--block-steps", type=int, default=100)
    a = p.parse_args()
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=0)
    monitor = None
    publish = "file:/dev/null"
    if a.stoker:
        port = free_port()
        monitor = subprocess.Popen([a.stoker, "monitor", f"127.0.0.1:{port}", "--json"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        publish = f"127.0.0.1:{port}"
    # The plain loop twice: the second one's "overhead" is the noise floor of the measurement.
    configs = [("plain loop", None),
               ("plain loop (again)", None),
               ("watch, interval 500 ms", {"publish": publish, "interval_ms": 500}),
               ("watch, interval 100 ms", {"publish": publish, "interval_ms": 100})]
    times = {name: [] for name, _ in configs}
    block(loader, 50, a.step_ms / 1e3, None)  # warm up
    for _ in range(a.blocks):
        for name, args in configs:
            times[name].append(block(loader, a.block_steps, a.step_ms / 1e3, args))
    # The best block of each configuration is its cost with the least interference from the rest of
    # the machine (a VM's neighbours, the monitor process); the median is shown beside it.
    base = min(times["plain loop"])
    base_median = statistics.median(times["plain loop"])
    print(f"step {a.step_ms:g} ms busy, DataLoader batch 64 of 3x32x32 float32, {a.blocks} x {a.block_steps} steps "
          f"per configuration, interleaved, publishing to {publish}")
    for name, _ in configs:
        best, median = min(times[name]), statistics.median(times[name])
        print(f"{name:24s} best {best * 1e3:7.4f} ms per step, overhead {1e6 * (best - base):+6.1f} us "
              f"{100 * (best - base) / base:+5.2f} %   (median {median * 1e3:7.4f} ms, "
              f"{100 * (median - base_median) / base_median:+5.2f} %)")
    p = stoker_probe._publishers.get(publish)
    if p is not None:
        print(f"records sent {p.sent}, dropped {p.dropped}")
    stoker_probe.shutdown()
    if monitor:
        monitor.terminate()
        monitor.wait()


if __name__ == "__main__":
    main()
