#!/usr/bin/python3
"""Remote checkpoint benchmark (issue 40): converting an HF sharded checkpoint that lives behind
HTTP, measured in one run against the same conversion of the local files and against what users
do today -- download the shards with curl, then convert the local copy.

nginx on loopback serves the shards; tests/net/fault_proxy.py in front of it adds 0, 10 or 50 ms
per request (the proxy, a Python process, caps one stream at about 0.5 GB/s; `direct` is nginx
without it). For each latency:

- inspect: `stoker ckpt inspect URL/` -- requests and seconds (the index and one header per shard);
- remote: `stoker ckpt convert URL/ OUT --to single` (range reads of 4 MiB parts, four in flight per job);
- local: the same conversion of the local folder (served from the page cache);
- curl + convert: `curl` fetching the index and every shard one after another (as `wget -r` or a
  download loop would), then the local conversion of the copy; and `curl --parallel` (all shards
  at once) + conversion.

    tests/bench/remote_ckpt_bench.py [--bytes 1GiB] [--shard 256MB] [--latencies direct,0,10,50] [--out DIR] [--json OUT]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from remote_bench import ROOT, serve  # noqa: E402


def size_bytes(text):
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB|KB|MB|GB)?", text)
    if not m:
        sys.exit(f"not a size: {text}")
    unit = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}.get(m.group(2), 1)
    return int(m.group(1)) * unit


def write_model(path, total):
    """A single .safetensors of float32 tensors of 8 MiB (and a few small ones), random values."""
    rng = np.random.default_rng(3)
    tensors, header, offset = [], {}, 0
    big = 2 << 20  # elements: 8 MiB
    i = 0
    while offset < total:
        n = big if i % 5 else 4096
        header[f"layers.{i}.weight"] = {"dtype": "F32", "shape": [n], "data_offsets": [offset, offset + n * 4]}
        tensors.append(n)
        offset += n * 4
        i += 1
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for n in tensors:
            f.write(rng.standard_normal(n, dtype=np.float32).tobytes())


def timed(cmd):
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr}")
    return wall, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", default="1GiB")
    ap.add_argument("--shard", default="256MB", help="the HF shard size (stoker ckpt convert --to hf:SIZE)")
    ap.add_argument("--latencies", default="direct,0,10,50")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "bench-data", "remote-ckpt"))
    ap.add_argument("--out", help="where the conversions and curl's copy are written (default: beside the data; "
                                   "/dev/shm takes this VM's noisy disk out of the figures)")
    ap.add_argument("--json")
    a = ap.parse_args()
    stoker = os.path.join(a.build, "bin", "stoker")
    www = os.path.join(a.data, "www")
    hf = os.path.join(www, f"hf-{a.bytes}-{a.shard}")
    if not os.path.exists(os.path.join(hf, "model.safetensors.index.json")):
        os.makedirs(a.data, exist_ok=True)
        single = os.path.join(a.data, f"model-{a.bytes}.safetensors")
        if not os.path.exists(single):
            write_model(single, size_bytes(a.bytes))
        shutil.rmtree(hf, ignore_errors=True)
        subprocess.run([stoker, "ckpt", "convert", single, hf, "--to", f"hf:{a.shard}"], check=True)
    shards = sorted(os.listdir(hf))
    total = sum(os.path.getsize(os.path.join(hf, n)) for n in shards)
    subprocess.run(["cat", *[os.path.join(hf, n) for n in shards]], stdout=subprocess.DEVNULL, check=True)

    run = os.path.join(a.data, "run")
    nginx_port, proxy_port, servers = serve(www, run)
    out_dir = a.out or run
    os.makedirs(out_dir, exist_ok=True)
    out, copy = os.path.join(out_dir, "out"), os.path.join(out_dir, "copy")
    rows = []
    try:
        print(f"{len(shards) - 1} shards, {total / 2**30:.2f} GiB; seconds (GB/s)", flush=True)
        for latency in a.latencies.split(","):
            if latency == "direct":
                base = f"http://127.0.0.1:{nginx_port}/"
            else:
                base = f"http://127.0.0.1:{proxy_port}/"
                urllib.request.urlopen(urllib.request.Request(base + "__fault", data=json.dumps({"latency_ms": int(latency)}).encode())).read()
            url = base + os.path.basename(hf) + "/"
            inspect_s, _ = timed([stoker, "ckpt", "inspect", url])
            convert = lambda src: timed([stoker, "ckpt", "convert", src, out, "--to", "single", "--force"])[0]
            local_s = convert(hf)
            remote_s = convert(url)
            row = {"latency_ms": latency, "inspect_s": inspect_s, "local_s": local_s, "remote_s": remote_s}
            for label, parallel in (("curl_then_convert_s", []), ("curl_parallel_then_convert_s", ["--parallel", "--parallel-max", "16"])):
                shutil.rmtree(copy, ignore_errors=True)
                os.makedirs(copy)
                fetch = []
                for n in shards:
                    fetch += ["-o", os.path.join(copy, n), url + n]
                start = time.perf_counter()
                subprocess.run(["curl", "-sf", *parallel, *fetch], check=True, stderr=subprocess.DEVNULL)
                download = time.perf_counter() - start
                row[label] = download + convert(copy)
                row[label.replace("then_convert", "download")] = download
            shutil.rmtree(copy, ignore_errors=True)
            rows.append(row)
            gbs = lambda s: f"{s:.2f} s ({total / s / 1e9:.2f} GB/s)"
            print(f"{latency:>6}{' ms' if latency != 'direct' else ''}  inspect {inspect_s:.2f} s; convert: remote {gbs(remote_s)} = "
                  f"{local_s / remote_s:.2f}x local ({gbs(local_s)}); {row['curl_then_convert_s'] / remote_s:.2f}x faster than curl + convert "
                  f"({gbs(row['curl_then_convert_s'])}, download {row['curl_download_s']:.2f} s); "
                  f"{row['curl_parallel_then_convert_s'] / remote_s:.2f}x curl --parallel + convert ({gbs(row['curl_parallel_then_convert_s'])})",
                  flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"bytes": total, "shards": len(shards) - 1, "rows": rows}, f, indent=1)
    finally:
        for p in servers:
            p.terminate()
            p.wait()
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
