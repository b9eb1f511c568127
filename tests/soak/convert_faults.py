#!/usr/bin/python3
"""Fault injection for `stoker ckpt convert`: crashes, full disks and a source truncated under it.

For each of --runs rounds, on a multi-file ranks checkpoint, with a random target and --jobs 2:
  kill    SIGKILL at a random moment of the conversion, then `--resume` to the end (or a plain
          restart when it died before creating DST);
  enospc  writes fail with ENOSPC after a random number of bytes (STOKER_FAULT_ENOSPC_AFTER),
          the run must exit 2 with one `error:` line, then `--resume` without the fault;
and after every interrupted run and every resume: no file under its final name is partial
(every final-named safetensors has exactly the size its header promises, every .pt is a
sound zip, an index exists only when all it names is complete), and the finished output is
what `stoker ckpt verify` declares equal to an uninterrupted conversion to the same target
(the source itself when no dtype changes).
  truncate  a private copy of one source file is truncated while the conversion runs: the
          conversion exits 2 naming that file (never a crash such as SIGBUS), or finishes
          before the truncation with output equal to the untruncated source; no final-named
          partial file either way.

usage: convert_faults.py --stoker build/bin/stoker [--runs 50] [--size-mib 96] [--work DIR] [--seed S]
Prints one line per round and a summary; exits 1 on any violation.
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE = os.path.join(HERE, "..", "bench", "make_ranks_checkpoint.py")
TARGETS = [
    ["--to", "ranks:3"], ["--to", "ranks:5"], ["--to", "ranks:2", "--dtype", "bf16"],
    ["--to", "hf:8MiB"], ["--to", "hf:20MiB", "--dtype", "f16"], ["--to", "single"], ["--to", "pt"],
]


def final_files(dst):
    """Files under their final names (not hidden temporaries, not the journal)."""
    out = []
    for root, dirs, files in os.walk(dst):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [os.path.join(root, f) for f in files if not f.startswith(".")]
    return out


def partial_files(dst):
    """Every final-named file that is not complete, with why."""
    bad = []
    files = final_files(dst)
    for path in files:
        name = os.path.basename(path)
        size = os.path.getsize(path)
        try:
            if name.endswith(".safetensors"):
                with open(path, "rb") as f:
                    n = struct.unpack("<Q", f.read(8))[0]
                    header = json.loads(f.read(n))
                end = max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] or [0])
                if size != 8 + n + end:
                    bad.append("%s: %d bytes, its header promises %d" % (path, size, 8 + n + end))
            elif name.endswith(".pt"):
                with zipfile.ZipFile(path) as z:
                    if z.testzip() is not None:
                        bad.append("%s: corrupt zip member" % path)
            elif name == "metadata.json":
                meta = json.load(open(path))
                for r in range(meta["num_ranks"]):
                    if not os.path.exists(os.path.join(dst, "rank_%d.safetensors" % r)):
                        bad.append("%s exists but rank_%d.safetensors does not" % (path, r))
            elif name.endswith(".index.json"):
                index = json.load(open(path))
                for shard in set(index["weight_map"].values()):
                    if not os.path.exists(os.path.join(dst, shard)):
                        bad.append("%s exists but %s does not" % (path, shard))
        except Exception as e:  # unreadable under its final name = partial
            bad.append("%s: %s" % (path, e))
    return bad


class Popen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        self.started = time.monotonic()
        super().__init__(*args, **kwargs)


subprocess.Popen = Popen


def wait_for(dst, proc):
    """Seconds from the start until DST exists (or the process ended)."""
    while not os.path.exists(dst) and proc.poll() is None:
        time.sleep(0.005)
    return time.monotonic() - proc.started


def run(cmd, env=None, timeout=600):
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stoker", required=True)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--size-mib", type=int, default=96)
    p.add_argument("--work")
    p.add_argument("--seed", type=int, default=int(time.time()))
    a = p.parse_args()
    rng = random.Random(a.seed)
    work = a.work or tempfile.mkdtemp(prefix="stoker-convert-faults-")
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "src")
    if not os.path.exists(os.path.join(src, "metadata.json")):
        subprocess.run([sys.executable, MAKE, src, "--ranks", "8", "--size-mib", str(a.size_mib)], check=True)
    stoker = os.path.abspath(a.stoker)
    print("convert faults: seed %d, %d rounds, source %s (8 ranks, %d MiB)" % (a.seed, a.runs, src, a.size_mib))

    # How long an uninterrupted conversion takes, per target: kills land inside that window. Its
    # output is also the reference a resumed conversion must equal (a dtype target differs from
    # the source by design, so `verify` compares it with this one).
    durations, references = {}, {}
    for i, t in enumerate(TARGETS):
        dst = os.path.join(work, "reference-%d" % i)
        references[" ".join(t)] = dst
        shutil.rmtree(dst, ignore_errors=True)
        t0 = time.monotonic()
        r = run([stoker, "ckpt", "convert", src, dst, "--jobs", "2"] + t)
        if r.returncode != 0:
            sys.exit("convert %s failed: %s" % (" ".join(t), r.stderr.decode()))
        durations[" ".join(t)] = time.monotonic() - t0
    print("uninterrupted: " + ", ".join("%s %.2fs" % (k, v) for k, v in durations.items()))

    violations, counts = [], {"kill": 0, "enospc": 0, "truncate": 0, "resumed": 0, "restarted": 0,
                              "finished": 0, "verified": 0}
    total_bytes = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))

    def check_partial(round_name, dst):
        for b in partial_files(dst):
            violations.append("%s: final-named partial file: %s" % (round_name, b))

    def resume_and_verify(round_name, dst, target):
        # Killed before it created DST, there is nothing to resume: the user simply starts again.
        resume = ["--resume"] if os.path.exists(dst) else []
        r = run([stoker, "ckpt", "convert", src, dst, "--jobs", "2"] + resume + target)
        counts["resumed" if resume else "restarted"] += 1
        if r.returncode != 0:
            violations.append("%s: --resume exited %d: %s" % (round_name, r.returncode, r.stderr.decode().strip()))
            return
        check_partial(round_name + " (resumed)", dst)
        v = run([stoker, "ckpt", "verify", references[" ".join(target)], dst])
        if v.returncode != 0:
            violations.append("%s: verify exited %d: %s" % (round_name, v.returncode, (v.stdout + v.stderr).decode()[-400:]))
        else:
            counts["verified"] += 1

    for i in range(a.runs):
        target = rng.choice(TARGETS)
        key = " ".join(target)
        dst = os.path.join(work, "dst")
        shutil.rmtree(dst, ignore_errors=True)
        kind = rng.choice(["kill", "kill", "enospc", "truncate"])
        name = "round %d (%s, %s)" % (i, kind, key)
        cmd = [stoker, "ckpt", "convert", src, dst, "--jobs", "2"] + target
        if kind == "kill":
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # Half the kills anywhere, half once the copying has begun (DST exists).
            delay = rng.uniform(0.05, durations[key])
            if rng.random() < 0.5:
                delay = wait_for(dst, proc) + rng.uniform(0, durations[key] / 2)
            time.sleep(max(0.0, delay - (time.monotonic() - proc.started)))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            counts["kill"] += 1
            check_partial(name, dst)
            if proc.returncode == 0:  # it finished before the kill: check it, there is nothing to resume
                counts["finished"] += 1
                v = run([stoker, "ckpt", "verify", references[key], dst])
                if v.returncode != 0:
                    violations.append("%s: finished but differs from the reference" % name)
                print("%s: finished before the kill" % name)
                continue
            resume_and_verify(name, dst, target)
            print("%s: killed after %.2fs" % (name, delay))
        elif kind == "enospc":
            budget = rng.randint(1, total_bytes)
            env = dict(os.environ, STOKER_FAULT_ENOSPC_AFTER=str(budget))
            r = run(cmd, env=env)
            err = r.stderr.decode().strip().splitlines()
            counts["enospc"] += 1
            if r.returncode == 0:  # the budget outlasted the bytes it had to write
                counts["finished"] += 1
                check_partial(name, dst)
                v = run([stoker, "ckpt", "verify", references[key], dst])
                if v.returncode != 0:
                    violations.append("%s: finished but differs from the reference" % name)
                print("%s: disk never filled (%d bytes budget)" % (name, budget))
                continue
            elif r.returncode != 2 or not err or not err[-1].startswith("error: ") or "No space left" not in err[-1]:
                violations.append("%s: exit %d, stderr %r (want exit 2 and one error line naming ENOSPC)"
                                  % (name, r.returncode, err[-3:]))
            check_partial(name, dst)
            resume_and_verify(name, dst, target)
            print("%s: disk full after %d bytes -> exit %d" % (name, budget, r.returncode))
        else:
            victim_src = os.path.join(work, "src-copy")
            shutil.rmtree(victim_src, ignore_errors=True)
            shutil.copytree(src, victim_src)
            victim = os.path.join(victim_src, "rank_%d.safetensors" % rng.randrange(8))
            cut = rng.randint(0, os.path.getsize(victim) - 1)
            proc = subprocess.Popen([stoker, "ckpt", "convert", victim_src, dst, "--jobs", "2"] + target,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # Mostly while the copying runs (DST exists), sometimes before it starts.
            delay = rng.uniform(0.0, durations[key])
            if rng.random() < 0.8:
                delay = wait_for(dst, proc) + rng.uniform(0, durations[key] / 2)
            time.sleep(max(0.0, delay - (time.monotonic() - proc.started)))
            os.truncate(victim, cut)
            _, err = proc.communicate(timeout=600)
            err = err.decode().strip().splitlines()
            counts["truncate"] += 1
            if proc.returncode == 0:
                # Finished before the cut reached it: the output must equal the untruncated one.
                v = run([stoker, "ckpt", "verify", references[key], dst])
                if v.returncode != 0:
                    violations.append("%s: finished but differs from the source" % name)
            elif proc.returncode != 2 or not err or not err[-1].startswith("error: "):
                violations.append("%s: exit %d (signal %s), stderr %r (want exit 2 and one error line)"
                                  % (name, proc.returncode, -proc.returncode if proc.returncode < 0 else "-", err[-3:]))
            check_partial(name, dst)
            print("%s: %s cut to %d bytes after %.2fs -> exit %d %s" % (
                name, os.path.basename(victim), cut, delay, proc.returncode, err[-1] if err else ""))

    print("summary: %d kills, %d disk-full runs, %d truncations; %d resumed, %d started again (killed before DST "
          "existed), %d finished before their fault, %d verified equal; %d violations"
          % (counts["kill"], counts["enospc"], counts["truncate"], counts["resumed"], counts["restarted"],
             counts["finished"], counts["verified"], len(violations)))
    for v in violations:
        print("VIOLATION " + v)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
