#!/usr/bin/python3
"""Multi-process fault injection for `stoker feed`: a rank killed at a random moment.

Each round starts W ranks (2-4) of one job (torchrun variables, c10d TCPStore + Gloo on
loopback) with a progress file, SIGKILLs a random rank (rank 0, which hosts the store, included)
at a random moment, and checks:
  - every other rank exits non-zero with one `error:` line within --exit-timeout seconds
    (never a hang);
  - a restart with `--resume` on a random world size (1-4) completes the epoch, and the samples
    of the committed steps before the kill plus those after the resume are the whole dataset,
    each exactly once (padding repeats on the new world size aside).

usage: feed_kill.py --stoker build/bin/stoker [--rounds 20] [--seed S]
Prints one line per round and a summary; exits 1 on any violation.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SAMPLES = 3000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(stoker, world, args):
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([stoker, "feed"] + args, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def records(d):
    """(epoch, consumed_before, indices) of every step line any rank recorded in d."""
    out = []
    if not os.path.isdir(d):
        return out
    for f in os.listdir(d):
        for line in open(os.path.join(d, f)):
            parts = line.split()
            if len(parts) >= 3:
                out.append((int(parts[0]), int(parts[2]), [int(x) for x in parts[3:]]))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stoker", required=True)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--exit-timeout", type=float, default=60)
    p.add_argument("--seed", type=int, default=int(time.time()))
    a = p.parse_args()
    rng = random.Random(a.seed)
    stoker = os.path.abspath(a.stoker)
    violations = []
    print("feed kill: seed %d, %d rounds, %d samples" % (a.seed, a.rounds, SAMPLES))
    for i in range(a.rounds):
        work = tempfile.mkdtemp(prefix="stoker-feed-kill-")
        progress = os.path.join(work, "progress.json")
        world, victim = rng.randint(2, 4), None
        victim = rng.randrange(world)
        common = ["--dataset", "synthetic:%d,4" % SAMPLES, "--batch-size", "10", "--seed", "7",
                  "--progress", progress, "--rendezvous-timeout", "15"]
        procs = start(stoker, world, common + ["--step-us", "20000", "--record", os.path.join(work, "before")])
        t_start = time.monotonic()
        if rng.random() < 0.25:  # anywhere, the rendezvous included
            time.sleep(rng.uniform(0.0, 2.0))
        else:  # mid-epoch: after the first committed step (an epoch takes 3000 / (10 x world) x 20 ms)
            while not os.path.exists(progress) and time.monotonic() - t_start < 60:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 6.0 / world))
        delay = time.monotonic() - t_start
        procs[victim].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        name = "round %d (world %d, rank %d killed after %.2fs)" % (i, world, victim, delay)
        hung = False
        for r, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=max(0.1, a.exit_timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                hung = True
                proc.kill()
                _, err = proc.communicate()
                violations.append("%s: rank %d still running %.0f s after the kill" % (name, r, a.exit_timeout))
                continue
            if r == victim:
                continue
            lines = err.decode().strip().splitlines()
            if proc.returncode == 0:
                continue  # it finished its last step before the kill mattered
            if proc.returncode < 0 or not lines or not lines[-1].startswith("error: "):
                violations.append("%s: rank %d exited %d with %r (want one error: line)" % (name, r, proc.returncode, lines[-2:]))
        others = time.monotonic() - t0

        # Resume on another world size, or start over if nothing was committed.
        committed = json.load(open(progress)) if os.path.exists(progress) else None
        k = committed["consumed"] if committed and committed["epoch"] == 0 else 0
        finished = committed is not None and committed["epoch"] >= 1
        new_world = rng.randint(1, 4)
        after_dir = os.path.join(work, "after")
        if not finished:
            resume = ["--resume"] if committed else []
            procs = start(stoker, new_world, common + resume + ["--record", after_dir])
            for r, proc in enumerate(procs):
                try:
                    _, err = proc.communicate(timeout=300)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    err = b"hung"
                if proc.returncode != 0:
                    violations.append("%s: resumed rank %d exited %d: %s" % (name, r, proc.returncode, err.decode()[-300:]))
        before = [s for e, c, idx in records(os.path.join(work, "before")) if e == 0 and c < k for s in idx]
        after = [s for e, c, idx in records(after_dir) if e == 0 for s in idx]
        if len(before) != k or len(set(before)) != k:
            violations.append("%s: the %d committed samples before the kill are not %d distinct ones" % (name, len(before), k))
        if not finished:
            overlap = set(before) & set(after)
            if overlap:
                violations.append("%s: %d samples repeated after the resume" % (name, len(overlap)))
            if set(before) | set(after) != set(range(SAMPLES)):
                violations.append("%s: %d samples never seen" % (name, SAMPLES - len(set(before) | set(after))))
            final = json.load(open(progress)) if os.path.exists(progress) else {}
            if final.get("epoch") != 1:
                violations.append("%s: the resumed job did not complete the epoch (%s)" % (name, final))
        print("%s: others exited in %.1fs; %d committed, resumed on %d ranks%s" % (
            name, others, k, new_world, " (already finished)" if finished else ""))
        sys.stdout.flush()
        shutil.rmtree(work, ignore_errors=True)
    print("summary: %d rounds, %d violations" % (a.rounds, len(violations)))
    for v in violations:
        print("VIOLATION " + v)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
