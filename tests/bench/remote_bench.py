#!/usr/bin/python3
"""Remote dataset benchmark (issue 40), measured in one run against the same files read locally:
nginx on loopback serves a token file and WebDataset shards, tests/net/fault_proxy.py in front of
it adds 0, 10 or 50 ms to every request (the proxy itself, a Python process, caps one stream at
about 0.5 GB/s). For each latency:

- tokens (batches 64 x 1024 of a nanoGPT .bin, random windows) with cache_dir: the first epoch
  (parts fetched from the network into a fresh cache) and the steady epochs after it (served from
  the cache), against `stoker bench` on the local file; against downloading the file first (curl
  onto the same disk) and then reading it locally, and beside curl into /dev/null (the network
  path alone: a first epoch that must fetch every byte cannot beat it); and the Python peer, a
  Dataset whose __getitem__ reads its window with an urllib Range request, in a DataLoader (2
  workers);
- WebDataset shards (real photos, Resize(64),CenterCrop(56)) with cache_dir: the whole run (open
  = the shard scan, then one epoch, process start included) against the same local run, and
  against WebDataset's `pipe:curl` way: curl per shard piped into tarfile + PIL + torchvision in a
  DataLoader with 2 workers (timed from its first batch request, imports excluded), on the same
  footing as Stoker's open + epoch (`run_seconds`: libtorch's loading, its imports, left out) and
  beside Stoker's whole process; plus `curl`
  fetching the shards one by one, the download alone.

    tests/bench/remote_bench.py [--tokens-bytes 1GiB] [--latencies direct,0,10,50] [--images 1000]
                                [--per-shard 50] [--max-inflight-parts N] [--json OUT]

The runs without a cache also say how many bytes nginx sent, against the shards' own (its access
log): the open's scan and the epoch together.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peak_memory import peak_anon  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"

NGINX_CONF = """daemon off; master_process off; worker_processes 1;
pid {root}/nginx.pid; error_log {root}/error.log;
events {{ worker_connections 1024; }}
http {{ {access_log} sendfile on; keepalive_requests 100000;
  client_body_temp_path {root}/tmp; proxy_temp_path {root}/tmp; fastcgi_temp_path {root}/tmp;
  uwsgi_temp_path {root}/tmp; scgi_temp_path {root}/tmp;
  server {{ listen 127.0.0.1:{port}; root {www}; }} }}
"""


def nginx_conf(root, port, www, log_bytes=False):
    """nginx's configuration, with its files in `root`; `log_bytes`: root/access.log gets the bytes
    of each reply's body, one line each."""
    access_log = f"log_format sent '$body_bytes_sent'; access_log {root}/access.log sent;" if log_bytes else "access_log off;"
    return NGINX_CONF.format(root=root, port=port, www=www, access_log=access_log)


PYTHON_PEER = r'''
import sys, time, json, urllib.request, numpy as np, torch
from torch.utils.data import Dataset, DataLoader
url, size, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ctx = 1024
class RemoteTokens(Dataset):
    def __len__(self):
        return (size // 2 - 1) // ctx
    def __getitem__(self, i):
        start = i * ctx * 2
        req = urllib.request.Request(url, headers={"Range": f"bytes={start}-{start + (ctx + 1) * 2 - 1}"})
        w = torch.from_numpy(np.frombuffer(urllib.request.urlopen(req).read(), dtype=np.uint16).astype(np.int64))
        return w[:-1], w[1:]
loader = DataLoader(RemoteTokens(), batch_size=64, shuffle=True, num_workers=2, drop_last=True)
n, start = 0, time.perf_counter()
for x, y in loader:
    n += x.shape[0]
    if time.perf_counter() - start > seconds:
        break
print(json.dumps({"samples_per_s": n / (time.perf_counter() - start)}))
'''


# WebDataset's `pipe:curl`: each shard a curl process piped into a tar stream, decoded and
# transformed with PIL and torchvision in a DataLoader's worker processes (shards split by worker).
PIPE_CURL_PEER = r'''
import io, sys, time, json, tarfile, subprocess, torch
from PIL import Image
from torch.utils.data import IterableDataset, DataLoader, get_worker_info
import torchvision.transforms as T
urls = sys.argv[1:]
transform = T.Compose([T.Resize(64), T.CenterCrop(56), T.ToTensor()])
class PipeCurl(IterableDataset):
    def __iter__(self):
        w = get_worker_info()
        for url in urls[w.id::w.num_workers] if w else urls:
            curl = subprocess.Popen(["curl", "-s", url], stdout=subprocess.PIPE)
            image = None
            with tarfile.open(fileobj=curl.stdout, mode="r|") as tar:
                for m in tar:
                    data = tar.extractfile(m).read()
                    if m.name.endswith((".jpg", ".png")):
                        image = transform(Image.open(io.BytesIO(data)).convert("RGB"))
                    elif m.name.endswith(".cls"):
                        yield image, int(data)
            curl.wait()
start, n = time.perf_counter(), 0
for x, y in DataLoader(PipeCurl(), batch_size=64, num_workers=2):
    n += x.shape[0]
print(json.dumps({"images": n, "images_per_s": n / (time.perf_counter() - start)}))
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, seconds=10):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def serve(www, run):
    """nginx serving `www` and the fault proxy in front of it, both on free loopback ports, with
    their files in a fresh `run` folder. Returns (nginx port, proxy port, [processes])."""
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(os.path.join(run, "tmp"))
    nginx_port, proxy_port = free_port(), free_port()
    with open(os.path.join(run, "nginx.conf"), "w") as f:
        f.write(nginx_conf(run, nginx_port, www, log_bytes=True))
    servers = [subprocess.Popen(["/usr/sbin/nginx", "-c", os.path.join(run, "nginx.conf"), "-p", run], stderr=subprocess.DEVNULL),
               subprocess.Popen([PY, os.path.join(ROOT, "tests", "net", "fault_proxy.py"), str(proxy_port), str(nginx_port)],
                                stdout=subprocess.DEVNULL)]
    wait_port(nginx_port)
    wait_port(proxy_port)
    return nginx_port, proxy_port, servers


def served_bytes(run, nginx):
    """The bytes nginx sent since the last call (its access log, emptied and reopened)."""
    log = os.path.join(run, "access.log")
    sent = sum(int(line) for line in open(log) if line.strip().isdigit()) if os.path.exists(log) else 0
    open(log, "w").close()
    subprocess.run(["kill", "-USR1", str(nginx.pid)], check=True)  # nginx reopens its log
    time.sleep(0.1)
    return sent


def bench(stoker, spec, options, epochs, extra=()):
    """`stoker bench --json`; returns (document, wall seconds of the whole process)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(options, f)
    start = time.perf_counter()
    p = subprocess.run([stoker, "bench", "--dataset", spec, "--options", f.name, "--epochs", str(epochs), "--json", "--quiet", *extra],
                       capture_output=True, text=True)
    wall = time.perf_counter() - start
    os.unlink(f.name)
    if p.returncode != 0:
        sys.exit(f"stoker bench {spec} failed: {p.stderr}")
    return json.loads(p.stdout), wall


def epoch_rates(doc):
    return [e["samples_per_s"] for e in doc["per_device"][0]["epochs"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens-bytes", default="1GiB")
    ap.add_argument("--latencies", default="direct,0,10,50", help="ms the proxy adds per request; direct = nginx without the proxy")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--per-shard", type=int, default=50, help="photos per WebDataset shard (50: one 8 MiB part a shard)")
    ap.add_argument("--max-inflight-parts", type=int, default=4, help="the remote runs' max_inflight_parts")
    ap.add_argument("--readahead-mb", type=int, default=0,
                    help="the WebDataset run without a cache holds at most this many MiB of blocks (readahead_mb; default 1024): "
                         "below the shards' size, the first epoch fetches again what the scan could not keep")
    ap.add_argument("--peer-seconds", type=float, default=6)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "bench-data", "remote"))
    ap.add_argument("--memory-file", default="", help="also: peak memory reading a token file of this size (4GiB) without and with a cache")
    ap.add_argument("--wds-only", action="store_true", help="skip the token runs and the Python peer")
    ap.add_argument("--relay", choices=["proxy", "splice"], default="proxy",
                    help="what adds the latency: tests/net/fault_proxy.py (a Python HTTP server: it takes CPU from the loader "
                         "on a 2-core machine) or tests/bench/latency_relay.py (bytes moved by the kernel)")
    ap.add_argument("--json")
    a = ap.parse_args()
    stoker = os.path.join(a.build, "bin", "stoker")
    www = os.path.join(a.data, "www")
    tokens = os.path.join(www, "tokens-" + a.tokens_bytes)
    if not os.path.exists(os.path.join(tokens, "tokens.bin")):
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_token_files.py"), tokens, "--tokens-bytes", a.tokens_bytes],
                       check=True, stdout=subprocess.DEVNULL)
    shards = os.path.join(www, f"shards-{a.images}" + (f"-{a.per_shard}" if a.per_shard != 50 else ""))
    if not os.path.isdir(shards):
        photos = os.path.join(a.data, f"photos-{a.images}")  # one folder per count: the script adds to a folder, never clears it
        per_class = a.images // 10
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_photo_folder.py"), photos, "--classes", "10",
                        "--per-class", str(per_class), "--seed", "4"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_wds_shards.py"), photos, shards, "--per-shard", str(a.per_shard)],
                       check=True, stdout=subprocess.DEVNULL)
    shard_names = sorted(n for n in os.listdir(shards) if n.endswith(".tar"))
    shard_bytes = sum(os.path.getsize(os.path.join(shards, n)) for n in shard_names)
    images = a.images // 10 * 10
    token_file = os.path.join(tokens, "tokens.bin")
    token_bytes = os.path.getsize(token_file)
    subprocess.run(["cat", token_file, *[os.path.join(shards, n) for n in shard_names]], stdout=subprocess.DEVNULL, check=True)

    run = os.path.join(a.data, "run")
    nginx_port, proxy_port, servers = serve(www, run)
    relay = None  # latency_relay.py for the latency being measured (--relay splice)
    try:
        base = f"http://127.0.0.1:{proxy_port}/"
        rel_tokens = os.path.relpath(token_file, www)
        pattern = f"{os.path.basename(shards)}/{shard_names[0][:-10]}{{{shard_names[0][-10:-4]}..{shard_names[-1][-10:-4]}}}.tar"
        token_opts = {"batch_size": 64}
        image_opts = {"batch_size": 64, "transforms": "Resize(64),CenterCrop(56)"}
        rows = []
        for latency in a.latencies.split(","):
            if relay:
                relay.kill()
                relay.wait()
                relay = None
            if latency == "direct":  # nginx itself, no proxy: what the network path costs without the Python proxy's copy
                base = f"http://127.0.0.1:{nginx_port}/"
            elif a.relay == "splice":
                relay_port = free_port()
                relay = subprocess.Popen([PY, os.path.join(HERE, "latency_relay.py"), str(relay_port), str(nginx_port), latency])
                wait_port(relay_port)
                base = f"http://127.0.0.1:{relay_port}/"
            else:
                base = f"http://127.0.0.1:{proxy_port}/"
                urllib.request.urlopen(urllib.request.Request(base + "__fault", data=json.dumps({"latency_ms": int(latency)}).encode())).read()
            # The local runs beside each remote one: this VM's speed drifts, ratios are taken in one window.
            local_wds, local_wds_wall = bench(stoker, f"wds:{www}/{pattern}", image_opts, 1)
            cache = os.path.join(run, f"cache-{latency}")
            remote_wds, remote_wds_wall = bench(stoker, f"wds:{base}{pattern}", {**image_opts, "cache_dir": cache, "max_inflight_parts": a.max_inflight_parts}, 1)
            shutil.rmtree(cache)
            served_bytes(run, servers[0])
            # scan_cache=off: every round scans, as a first open does (a later one reads the kept scans).
            readahead = (f",readahead_mb={a.readahead_mb}" if a.readahead_mb else "") + ",scan_cache=off"
            _, nocache_wds_wall = bench(stoker, f"wds:{base}{pattern}{readahead}", {**image_opts, "max_inflight_parts": a.max_inflight_parts}, 1)
            nocache_sent = served_bytes(run, servers[0]) / shard_bytes  # the open's scan and the epoch together
            if a.wds_only:
                print(f"{latency:>6}{' ms' if latency != 'direct' else ''}  wds: {images / remote_wds_wall:,.0f} img/s with a cache = "
                      f"{local_wds_wall / remote_wds_wall:.2f}x local ({images / local_wds_wall:,.0f}), without "
                      f"{images / nocache_wds_wall:,.0f} img/s = {local_wds_wall / nocache_wds_wall:.2f}x "
                      f"(the server sent {nocache_sent:.2f}x the shards' bytes)", flush=True)
                rows.append({"latency_ms": latency, "wds_local_img_s": images / local_wds_wall, "wds_remote_img_s": images / remote_wds_wall,
                             "wds_remote_nocache_img_s": images / nocache_wds_wall, "wds_nocache_served_x": nocache_sent})
                continue
            local_tokens, _ = bench(stoker, f"tokens:{token_file},ctx=1024", token_opts, 3)
            remote_tokens, _ = bench(stoker, f"tokens:{base}{rel_tokens},ctx=1024", {**token_opts, "cache_dir": cache, "max_inflight_parts": a.max_inflight_parts}, 3)
            shutil.rmtree(cache)
            start = time.perf_counter()
            fetch = []
            for n in shard_names:  # one after another on one connection, as `pipe:curl` shard by shard
                fetch += ["-o", "/dev/null", f"{base}{os.path.basename(shards)}/{n}"]
            subprocess.run(["curl", "-s", *fetch], check=True)
            curl_wall = time.perf_counter() - start
            pipe = subprocess.run([PY, "-c", PIPE_CURL_PEER, *[f"{base}{os.path.basename(shards)}/{n}" for n in shard_names]],
                                  capture_output=True, text=True, check=True)
            pipe_doc = json.loads(pipe.stdout)
            if pipe_doc["images"] != images:
                sys.exit(f"pipe:curl peer read {pipe_doc['images']} images, not {images}")
            peer = subprocess.run([PY, "-c", PYTHON_PEER, base + rel_tokens, str(token_bytes), str(a.peer_seconds)],
                                  capture_output=True, text=True, check=True)
            # The other way to train on a remote token file: download it first (curl, onto the disk the
            # cache uses), then read it locally; and what the network path alone costs (curl into
            # /dev/null), the bound on any first epoch that must fetch every byte.
            copy = os.path.join(run, "tokens-copy.bin")
            start = time.perf_counter()
            subprocess.run(["curl", "-s", "-o", copy, base + rel_tokens], check=True)
            download_s = time.perf_counter() - start
            after_download, _ = bench(stoker, f"tokens:{copy},ctx=1024", token_opts, 1)
            os.unlink(copy)
            start = time.perf_counter()
            subprocess.run(["curl", "-s", "-o", "/dev/null", base + rel_tokens], check=True)
            network_s = time.perf_counter() - start
            local_rates, remote_rates = epoch_rates(local_tokens), epoch_rates(remote_tokens)
            rows.append({
                "latency_ms": latency,
                "tokens_local_first": local_rates[0], "tokens_local_steady": local_tokens["samples_per_s"],
                "tokens_remote_first": remote_rates[0], "tokens_remote_steady": remote_tokens["samples_per_s"],
                "tokens_python_peer": json.loads(peer.stdout)["samples_per_s"],
                "tokens_remote_first_s": remote_tokens["per_device"][0]["epochs"][0]["seconds"],
                "tokens_local_first_s": local_tokens["per_device"][0]["epochs"][0]["seconds"],
                "tokens_download_then_epoch_s": download_s + after_download["per_device"][0]["epochs"][0]["seconds"],
                "tokens_curl_devnull_s": network_s,
                "wds_local_img_s": images / local_wds_wall, "wds_remote_img_s": images / remote_wds_wall,
                "wds_remote_nocache_img_s": images / nocache_wds_wall, "wds_nocache_served_x": nocache_sent,
                "wds_remote_open_epoch_img_s": images / remote_wds["run_seconds"],
                "wds_curl_img_s": images / curl_wall, "wds_pipe_curl_img_s": pipe_doc["images_per_s"],
            })
            r = rows[-1]
            print(f"{latency:>6}{' ms' if latency != 'direct' else ''}  tokens: first epoch {r['tokens_remote_first'] / r['tokens_local_first']:.2f}x local, "
                  f"steady {r['tokens_remote_steady'] / r['tokens_local_steady']:.2f}x local "
                  f"({r['tokens_remote_steady']:,.0f} vs {r['tokens_local_steady']:,.0f} windows/s); "
                  f"Python urllib+DataLoader {r['tokens_python_peer']:,.0f}/s = {r['tokens_remote_first'] / r['tokens_python_peer']:,.0f}x slower "
                  f"than Stoker's first epoch", flush=True)
            print(f"           tokens' first epoch {r['tokens_remote_first_s']:.2f} s: "
                  f"{r['tokens_download_then_epoch_s'] / r['tokens_remote_first_s']:.2f}x the speed of curl's download + a local epoch "
                  f"({r['tokens_download_then_epoch_s']:.2f} s); the network path alone (curl into /dev/null) "
                  f"{r['tokens_curl_devnull_s']:.2f} s, a local epoch {r['tokens_local_first_s']:.2f} s", flush=True)
            print(f"           wds: {r['wds_remote_img_s']:,.0f} img/s = {r['wds_remote_img_s'] / r['wds_local_img_s']:.2f}x local "
                  f"({r['wds_local_img_s']:,.0f}), without a cache {r['wds_remote_nocache_img_s'] / r['wds_local_img_s']:.2f}x "
                  f"(server bytes {r['wds_nocache_served_x']:.2f}x the shards'); "
                  f"vs pipe:curl + PIL/torchvision in a DataLoader ({r['wds_pipe_curl_img_s']:,.0f} img/s, from its first batch request): "
                  f"{r['wds_remote_open_epoch_img_s'] / r['wds_pipe_curl_img_s']:.2f}x Stoker's open + epoch "
                  f"({r['wds_remote_open_epoch_img_s']:,.0f} img/s), {r['wds_remote_img_s'] / r['wds_pipe_curl_img_s']:.2f}x its whole process; "
                  f"curl's download alone {r['wds_curl_img_s']:,.0f} img/s",
                  flush=True)
        memory = []
        if a.memory_file:
            big = os.path.join(www, "tokens-" + a.memory_file)
            if not os.path.exists(os.path.join(big, "tokens.bin")):
                subprocess.run([PY, os.path.join(ROOT, "tests", "datasets", "make_token_files.py"), big, "--tokens-bytes", a.memory_file],
                               check=True, stdout=subprocess.DEVNULL)
            spec = f"tokens:http://127.0.0.1:{nginx_port}/{os.path.relpath(big, www)}/tokens.bin,ctx=1024"
            for label, extra in (("no cache, 6,400 windows", {"num_samples": 6400}),
                                 ("cache_limit 1 GiB, 64,000 windows", {"num_samples": 64000, "cache_dir": os.path.join(run, "cache-big"),
                                                                        "cache_limit": 1 << 30})):
                opts = os.path.join(run, "memory.json")
                with open(opts, "w") as f:
                    json.dump({"batch_size": 64, "sampler_type": "random_with_replacement", **extra}, f)
                _, anon = peak_anon([stoker, "bench", "--dataset", spec, "--options", opts, "--epochs", "1", "--json", "--quiet"])
                memory.append({"run": label, "peak_anon_bytes": anon})
                print(f"{a.memory_file} token file over HTTP, {label}: peak anonymous memory {anon / 2**20:.0f} MiB", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"token_file_bytes": token_bytes, "images": images, "rows": rows, "memory": memory}, f, indent=1)
    finally:
        for p in servers + ([relay] if relay else []):
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
