"""One rank of a Gloo DDP job training on Fashion-MNIST through stoker.Loader (started with
torchrun's variables by ddp_resume.py). Records every sample index it trains on; after each step
rank 0 saves the loader's state_dict (the checkpoint a job would write). With STOP_AFTER=k every
rank stops at step k and waits to be killed."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import stoker

torch.set_num_threads(1)
out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
stop_after = int(os.environ.get("STOP_AFTER", "0"))
dist.init_process_group("gloo")

loader = stoker.Loader("fashion-mnist", batch_size=50, shuffle=True, seed=3, num_workers=1)
assert loader.rank == rank and loader.world_size == world
state_path = os.path.join(out, "loader_state.json")
if os.environ.get("RESUME"):
    with open(state_path) as f:
        loader.load_state_dict(json.load(f))

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(784, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
epoch = loader.state_dict()["epoch"]
if not os.environ.get("RESUME"):
    # Every rank's order is exactly DistributedSampler's for the same seed and epoch.
    sampler = torch.utils.data.DistributedSampler(range(60000), num_replicas=world, rank=rank, shuffle=True, seed=3)
    sampler.set_epoch(epoch)
    assert loader.order(epoch).tolist() == list(sampler), f"rank {rank}: order differs from DistributedSampler's"

log = open(os.path.join(out, f"indices_{os.environ.get('RUN', 'a')}_{rank}.txt"), "w")
it = iter(loader)
for step, (x, y) in enumerate(it, 1):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x.flatten(1)), y).backward()
    opt.step()
    log.write(" ".join(map(str, it.indices.tolist())) + "\n")
    log.flush()
    if rank == 0:
        tmp = state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(loader.state_dict(), f)
        os.replace(tmp, state_path)
    dist.barrier()  # the state rank 0 saved covers every rank's step
    if stop_after and step == stop_after:
        open(os.path.join(out, f"stopped_{rank}"), "w").close()
        time.sleep(600)  # killed here
log.close()
dist.destroy_process_group()
