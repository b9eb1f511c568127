"""The workbench's "Python (stoker)" export (`stoker bench --export-python`, the same function): the
snippet runs as pasted with Debian's python3, and its first epoch serves exactly Stoker's samples --
RandomSampler's order for the seed, and DistributedSampler's for a saved distributed setting."""

import json
import os
import subprocess
import sys
import tempfile

import torch

from common import result

STOKER = os.environ["STOKER_CLI"]


def snippet(*args):
    r = subprocess.run([STOKER, "bench", "--export-python", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def first_epoch(text):
    scope = {}
    exec(compile(text, "<snippet>", "exec"), scope)
    loader = scope["loader"]
    it = iter(loader)
    order = [i for _ in it for i in it.indices.tolist()]
    return loader, order


with tempfile.TemporaryDirectory() as tmp:
    options = os.path.join(tmp, "options.json")
    with open(options, "w") as f:
        json.dump({"batch_size": 100, "seed": 11, "num_workers": 1, "drop_last": False}, f)
    text = snippet("--dataset", "fashion-mnist", "--options", options, "--device", "cpu")
    assert "stoker.Loader(" in text and '"fashion-mnist"' in text and "seed=11" in text, text
    loader, order = first_epoch(text)
    assert order == list(torch.utils.data.RandomSampler(range(60000), generator=torch.Generator().manual_seed(11))), \
        "the exported loader's first epoch is not Stoker's"
    assert len(loader) == 600

    with open(options, "w") as f:
        json.dump({"batch_size": 64, "seed": 5, "sampler_type": "distributed", "shard_rank": 1,
                   "shard_world_size": 3, "drop_last": True, "transforms": ""}, f)
    dist_text = snippet("--dataset", "synthetic:1000,4", "--options", options, "--device", "cpu")
    assert "rank=1" in dist_text and "world_size=3" in dist_text, dist_text
    _, dist_order = first_epoch(dist_text)
    sampler = torch.utils.data.DistributedSampler(range(1000), num_replicas=3, rank=1, shuffle=True, seed=5,
                                                  drop_last=True)
    expected = list(sampler)
    assert dist_order == expected[:len(expected) // 64 * 64], "the distributed export differs from DistributedSampler"
    result(samples=len(order), distributed_samples=len(dist_order))
