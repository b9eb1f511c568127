#!/usr/bin/python3
"""Ranks sharing their WebDataset scans (issue 40): N ranks of a Gloo job (launched here with
torchrun's variables) open `stoker.Loader("wds:http://...")` on the same remote shards, without
DALI indexes or a cache, and read one epoch. With share_scans (the default under torch.distributed)
each rank scans only the shards of its own first deal and the ranks swap the indexes; without it
(share_scans=False) every rank scans every shard. nginx on loopback serves the shards (its access
log counts the bytes sent), tests/bench/latency_relay.py adds LATENCY ms per request.

Reports, for each way: the bytes the server sent for the opens and the epoch (all ranks), the
slowest rank's open and open + epoch. Ranks alternate between the two ways, --rounds times.

With --feed the ranks are `stoker feed` processes (a c10d Gloo job whose planner deals samples),
sharing their scans over their group or not (--no-share-scans); each rank's whole run is timed,
process start included, beside the open and the epoch each rank reports. A third way, "local", runs the same ranks on
the shards' own files: the peer the remote runs are measured against.

    tests/bench/shared_scan_bench.py [--images 5000] [--per-shard 50] [--ranks 3] [--latency 10] [--rounds 2] [--feed]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from remote_bench import free_port, nginx_conf, served_bytes, wait_port  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"

RANK = r'''
import json, sys, time, torch.distributed as dist, stoker
dist.init_process_group("gloo")
spec, share = sys.argv[1], sys.argv[2] == "1"
dist.barrier()
start = time.perf_counter()
loader = stoker.Loader(spec, batch_size=64, num_workers=2, max_inflight_parts=16, share_scans=share,
                       transforms="Resize(64),CenterCrop(56)")
opened = time.perf_counter() - start
n = sum(x.shape[0] for x, _ in loader)
total = time.perf_counter() - start
dist.barrier()
print(json.dumps({"rank": dist.get_rank(), "open_s": opened, "run_s": total, "images": n}))
'''


def busy_cpu_seconds():
    """The machine's CPU time so far, every process and the kernel's network work included."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--per-shard", type=int, default=50)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--latency", default="10")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--feed", action="store_true", help="ranks are `stoker feed` processes, not Python ones")
    ap.add_argument("--max-inflight-parts", type=int, default=16, help="with --feed: the ranks' max_inflight_parts")
    ap.add_argument("--workers", type=int, default=2, help="with --feed: each rank's loader workers")
    ap.add_argument("--cache", action="store_true", help="with --feed: the ranks share a cache_dir (--options), emptied each run")
    a = ap.parse_args()
    if a.cache and not a.feed:
        ap.error("--cache is for --feed runs (the Python ranks take cache_dir= themselves)")
    work = tempfile.mkdtemp(prefix="stoker-shared-scan-")
    try:
        photos, www = os.path.join(work, "photos"), os.path.join(work, "www")
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_photo_folder.py"), photos, "--classes", "10",
                        "--per-class", str(a.images // 10)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_wds_shards.py"), photos, os.path.join(www, "shards"),
                        "--per-shard", str(a.per_shard)], check=True, stdout=subprocess.DEVNULL)
        tars = sorted(f for f in os.listdir(os.path.join(www, "shards")) if f.endswith(".tar"))
        shard_bytes = sum(os.path.getsize(os.path.join(www, "shards", f)) for f in tars)
        run = os.path.join(work, "nginx")
        os.makedirs(os.path.join(run, "tmp"))
        nginx_port, relay_port = free_port(), free_port()
        with open(os.path.join(run, "nginx.conf"), "w") as f:
            f.write(nginx_conf(run, nginx_port, www, log_bytes=True))
        servers = [subprocess.Popen(["/usr/sbin/nginx", "-c", os.path.join(run, "nginx.conf"), "-p", run], stderr=subprocess.DEVNULL)]
        wait_port(nginx_port)
        servers.append(subprocess.Popen([PY, os.path.join(HERE, "latency_relay.py"), str(relay_port), str(nginx_port), a.latency]))
        wait_port(relay_port)
        spec = f"wds:http://127.0.0.1:{relay_port}/shards/{tars[0][:-10]}{{000000..{len(tars) - 1:06d}}}.tar,scan_cache=off"  # each round scans
        local_spec = f"wds:{os.path.join(www, 'shards', tars[0][:-10])}{{000000..{len(tars) - 1:06d}}}.tar"
        ways = (("shared", "1"), ("each_scans_all", "0")) + ((("local", "1"),) if a.feed else ())
        results = {way: [] for way, _ in ways}
        try:
            for _ in range(a.rounds):
                for way, share in ways:
                    served_bytes(run, servers[0])  # the log starts empty
                    port = free_port()
                    if a.feed:  # 16 in flight as the Python ranks (--max-inflight-parts); with --cache, an empty cache each run, shared by the ranks (one node)
                        cache, options = os.path.join(work, "cache"), os.path.join(work, "options.json")
                        shutil.rmtree(cache, ignore_errors=True)
                        with open(options, "w") as f:
                            json.dump({"max_inflight_parts": a.max_inflight_parts, **({"cache_dir": cache} if a.cache else {})}, f)
                    procs = []
                    cpu_before = busy_cpu_seconds()
                    started = time.perf_counter()
                    for r in range(a.ranks):
                        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
                                   MASTER_PORT=str(port), PYTHONPATH=os.path.join(a.build, "python"))
                        if a.feed:
                            argv = [os.path.join(a.build, "bin", "stoker"), "feed", "--dataset", local_spec if way == "local" else spec, "--batch-size", "64",
                                    "--workers", str(a.workers), "--transforms", "Resize(64),CenterCrop(56)", "--json"]
                            argv += [] if share == "1" else ["--no-share-scans"]
                            argv += ["--options", options]
                        else:
                            argv = [PY, "-c", RANK, spec, share]
                        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
                    outs = []
                    for p in procs:
                        try:
                            outs.append(p.communicate(timeout=600)[0])
                        except subprocess.TimeoutExpired:
                            for q in procs:
                                q.kill()
                            sys.exit(f"a rank hung ({way})")
                        p.ended = time.perf_counter() - started
                    cpu = busy_cpu_seconds() - cpu_before
                    if any(p.returncode for p in procs):
                        sys.exit(f"a rank failed ({way})")
                    if a.feed:  # whole processes, and the open and the epoch each rank reports
                        docs = []
                        for p, out in zip(procs, outs):
                            doc = json.loads(out)
                            docs.append({"open_s": doc["open_s"], "run_s": p.ended, "epoch_s": sum(e["seconds"] for e in doc["epochs"]),
                                         "images": sum(e["samples"] for e in doc["epochs"])})
                    else:
                        docs = [json.loads(out.strip().splitlines()[-1]) for out in outs]
                    sent = served_bytes(run, servers[0])
                    row = {"server_bytes": sent, "of_shards": sent / shard_bytes,
                           "open_s": max(d["open_s"] for d in docs), "run_s": max(d["run_s"] for d in docs),
                           "images": sum(d["images"] for d in docs), "cpu_s": cpu}
                    if a.feed:
                        row["epoch_s"] = max(d["epoch_s"] for d in docs)
                    results[way].append(row)
                    timing = (f"open {row['open_s']:.2f} s, epoch {row['epoch_s']:.2f} s, whole process {row['run_s']:.2f} s" if a.feed else
                              f"open {row['open_s']:.2f} s, open + epoch {row['run_s']:.2f} s")
                    print(f"{way:>15}: server sent {sent / 1e6:,.1f} MB = {row['of_shards']:.2f}x the shards; slowest rank "
                          f"{timing}; machine CPU {cpu:.1f} s ({row['images']} images)", flush=True)
        finally:
            for p in servers:
                p.kill()
                p.wait()
        print(json.dumps({"ranks": a.ranks, "latency_ms": a.latency, "feed": a.feed, "cache": a.cache, "shards": len(tars), "shard_bytes": shard_bytes,
                          **results}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
