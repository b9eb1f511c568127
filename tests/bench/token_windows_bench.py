#!/usr/bin/python3
"""Uncached remote token windows (issue 40): a batch's windows as the ranges of one request against
a window a request, in one run, beside the same file read locally.

nginx on loopback serves a nanoGPT token file; tests/bench/latency_relay.py adds 10 and 50 ms to
every request (bytes moved by the kernel, so the relay takes no CPU from the loader). For each
worker count, `stoker bench` (batches of 64 x ctx 1024, shuffled, no cache_dir, one epoch) reads
the file locally, then from nginx directly and behind each latency twice: with
STOKER_HTTP_RANGES_PER_REQUEST=1 (a window a request: what S3, and servers that serve one range a
GET, get) and with the default (a batch's windows as the ranges of one request,
`Range: bytes=a-b,c-d,...`).

    tests/bench/token_windows_bench.py [--tokens-bytes 64MiB] [--workers 2,8] [--rounds 2] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import remote_bench as rb  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens-bytes", default="64MiB")
    ap.add_argument("--workers", default="2,8", help="num_workers values, comma-separated")
    ap.add_argument("--latencies", default="10,50", help="ms the relay adds (nginx direct is always measured)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(rb.ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(rb.ROOT, "build", "bench-data", "remote"))
    ap.add_argument("--json")
    a = ap.parse_args()
    stoker = os.path.join(a.build, "bin", "stoker")
    www = os.path.join(a.data, "www")
    rel = f"tokens-{a.tokens_bytes}/tokens.bin"
    if not os.path.exists(os.path.join(www, rel)):
        subprocess.run([rb.PY, os.path.join(rb.ROOT, "tests", "datasets", "make_token_files.py"), os.path.dirname(os.path.join(www, rel)),
                        "--tokens-bytes", a.tokens_bytes], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cat", os.path.join(www, rel)], stdout=subprocess.DEVNULL, check=True)  # into the page cache
    nginx, _, servers = rb.serve(www, os.path.join(a.data, "run-windows"))
    relays = []
    rows = []
    try:
        ports = [("direct", nginx)]
        for ms in a.latencies.split(","):
            port = rb.free_port()
            relays.append(subprocess.Popen([rb.PY, os.path.join(HERE, "latency_relay.py"), str(port), str(nginx), ms]))
            rb.wait_port(port)
            ports.append((f"{ms} ms", port))
        for rnd in range(a.rounds):
            for workers in (int(w) for w in a.workers.split(",")):
                options = {"batch_size": 64, "num_workers": workers, "max_inflight_parts": 16}
                doc, _ = rb.bench(stoker, f"tokens:{www}/{rel},ctx=1024", options, 2)
                local = max(rb.epoch_rates(doc))
                print(f"round {rnd + 1}, {workers} workers: local {local:,.0f} windows/s", flush=True)
                for label, port in ports:
                    rates = {}
                    for per in ("1", "64"):
                        os.environ["STOKER_HTTP_RANGES_PER_REQUEST"] = per
                        doc, _ = rb.bench(stoker, f"tokens:http://127.0.0.1:{port}/{rel},ctx=1024", options, 1)
                        rates[per] = rb.epoch_rates(doc)[0]
                    del os.environ["STOKER_HTTP_RANGES_PER_REQUEST"]
                    print(f"  {label:>6}: a window a request {rates['1']:,.0f}/s, a batch a request {rates['64']:,.0f}/s "
                          f"({rates['64'] / rates['1']:.1f}x; {rates['64'] / local:.3f} of local)", flush=True)
                    rows.append({"round": rnd + 1, "workers": workers, "latency": label, "local": local,
                                 "window_a_request": rates["1"], "batch_a_request": rates["64"]})
    finally:
        for r in relays:
            r.kill()
        for s in servers:
            s.kill()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
