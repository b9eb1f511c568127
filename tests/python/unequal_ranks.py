"""Unequal GPUs from Python: rank_weights splits every step by per-rank weights, rank_step_ms gives
each rank whole batches in proportion to its speed (El Che), as `stoker plan` does; the ranks
together see every sample once, and a weighted epoch resumes from state_dict on another world size.
The ranks are loaders in one process (their plans are pure functions of the request)."""

import time

import stoker
from common import result

SPEC, N, B = "synthetic:3000,4", 3000, 32


def ranks(world, **kw):
    return [stoker.Loader(SPEC, batch_size=B, shuffle=True, seed=4, rank=r, world_size=world, num_workers=1, **kw)
            for r in range(world)]


def epoch_of(loader, limit=None):
    seen, sizes = [], []
    it = iter(loader)
    for step, (x, y) in enumerate(it, 1):
        seen += it.indices.tolist()
        sizes.append(x.shape[0])
        if step == limit:  # a job stopped after this step (its state counts every batch yielded)
            break
    return seen, sizes


# Weighted 1:2:1: each global step of B x 3 = 96 samples goes 24 / 48 / 24.
weighted = ranks(3, rank_weights=[1, 2, 1])
runs = [epoch_of(l) for l in weighted]
assert runs[0][1][0] == 24 and runs[1][1][0] == 48 and runs[2][1][0] == 24, [r[1][:2] for r in runs]
assert len({len(r[1]) for r in runs}) == 1 and len(weighted[0]) == len(runs[0][1])  # same step count
assert sorted(sum((r[0] for r in runs), [])) == list(range(N)), "the weighted ranks do not cover the epoch once"
plan = stoker.plan(N, 3, seed=4, epoch=0, batch_size=B, weights=[1, 2, 1])
assert runs[1][0] == plan["ranks"][1]["indices"]
weighted_steps = len(runs[0][1])

# El Che: rank 1 is twice as slow, so it takes half as many whole batches as the others.
elche = ranks(3, rank_step_ms=[10, 20, 10])
runs = [epoch_of(l) for l in elche]
assert all(s == B for r in runs for s in r[1][:-1]), "El Che batches are whole batches"
assert len(runs[1][1]) * 2 <= len(runs[0][1]) + 2, [len(r[1]) for r in runs]
covered = sum((r[0] for r in runs), [])
assert set(covered) == set(range(N)), "the El Che ranks miss samples"

# A weighted epoch stopped after 10 steps resumes on 2 equal ranks: every sample once.
weighted = ranks(3, rank_weights=[1, 2, 1])
first = [epoch_of(l, limit=10) for l in weighted]
state = weighted[0].state_dict()
assert state["samples_consumed"] == 10 * B * 3, state
resumed = ranks(2)
for l in resumed:
    l.load_state_dict(state)
rest = [epoch_of(l)[0] for l in resumed]
seen = sum((r[0] for r in first), []) + sum(rest, [])
assert sorted(seen) == list(range(N)), "resuming a weighted epoch repeated or skipped samples"

# A split's next epoch is planned while this one runs and queued behind it, so the workers make its
# first batches before the boundary (as the sampler's next epoch is made): the epoch that adopts
# them serves exactly its own plan, epoch after epoch, and a set_epoch elsewhere drops them.
ahead = stoker.Loader(SPEC, batch_size=B, shuffle=True, seed=4, rank=1, world_size=3, num_workers=1,
                      rank_weights=[1, 2, 1], loading_mode="streaming")
queued = []
for e in (0, 1, 2, 5):
    if e == 5:
        ahead.set_epoch(5)
    it = iter(ahead)
    served = []
    for step, _ in enumerate(it):
        served += it.indices.tolist()
        if step == 1:
            time.sleep(0.5)  # a slow step: the plan of the next epoch (a thread) is ready by now
    queued.append(it.next_epoch_queued)
    expected = stoker.plan(N, 3, seed=4, epoch=e, batch_size=B, weights=[1, 2, 1])["ranks"][1]["indices"]
    assert served == expected, f"epoch {e} served another order than its plan"
assert queued == [True, True, True, True], queued
result(weighted_steps=weighted_steps, elche_batches=[len(r[1]) for r in runs], resumed=len(seen))
