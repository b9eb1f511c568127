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

# El Che's fast rank passes the epoch's sample count mid-epoch (it takes more batches a round): its
# state stays in the epoch until its last batch is out, and a mid-epoch state is refused on load
# (it said "epoch 1" halfway, and the resume skipped the rest of epoch 0).
fast = ranks(3, rank_step_ms=[10, 20, 10])[0]
it = iter(fast)
total = len(fast)
for step, _ in enumerate(it, 1):
    if step == total * 3 // 4:
        mid = fast.state_dict()
    if step == total:
        end = fast.state_dict()
assert mid["epoch"] == 0 and mid["samples_consumed"] > 0, mid
assert (end["epoch"], end["samples_consumed"]) == (1, 0), end  # after its last batch, before StopIteration
try:
    ranks(3, rank_step_ms=[10, 20, 10])[0].load_state_dict(mid)
    raise AssertionError("a mid-epoch El Che state was loaded")
except ValueError as e:
    assert "epoch boundaries only" in str(e), e

# A weighted split with drop_last saved after its last step (the rest makes no whole step): the
# state is the next epoch's start (it stayed in epoch 0 and its resume served nothing), and a state
# saved before this rule, (0, 96), loads as that too, not as an error ("batch size 16 is larger
# than the 4 samples left").
last = [stoker.Loader("synthetic:100,4", batch_size=16, rank=r, world_size=2, rank_weights=[1, 1], drop_last=True,
                      num_workers=0) for r in range(2)]
for l in last:
    steps = sum(1 for _ in zip(range(len(l)), l))
saved = last[0].state_dict()
assert steps == 3 and (saved["epoch"], saved["samples_consumed"]) == (1, 0), (steps, saved)
again = stoker.Loader("synthetic:100,4", batch_size=16, rank=0, world_size=2, rank_weights=[1, 1], drop_last=True,
                      num_workers=0)
again.load_state_dict(dict(saved, epoch=0, samples_consumed=96))
assert again.state_dict()["epoch"] == 1
assert len(list(again)) == 3, "the next epoch after a whole-step end"

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

# The weighted and with-replacement samplers on 3 ranks deal one draw (each rank takes positions r,
# r + 3, ... of it, as DistributedSampler deals): the ranks' shares differ and together are the draw.
# (Every rank took the whole draw: every GPU trained on the same batches.) A draw of num_samples
# longer than the dataset resumes where it stopped, not at the dataset's size.
for kind, extra in (("weighted", {"weights": [1.0 + i % 3 for i in range(100)]}), ("random_with_replacement", {})):
    whole = stoker.Loader("synthetic:100,4", batch_size=5, sampler=kind, num_samples=250, drop_last=False, **extra)
    draw = whole.order(0).tolist()
    shares = [stoker.Loader("synthetic:100,4", batch_size=5, sampler=kind, num_samples=250, drop_last=False,
                            rank=r, world_size=3, **extra) for r in range(3)]
    orders = [l.order(0).tolist() for l in shares]
    assert len(draw) == 250 and [len(o) for o in orders] == [84, 84, 84], (len(draw), [len(o) for o in orders])
    assert all(orders[i % 3][i // 3] == draw[i % 250] for i in range(252)), f"{kind}: the shares are not the draw dealt"
    assert len({len(l) for l in shares}) == 1 and orders[0] != orders[1]
    # Resume on the same world size after 30 of rank 1's 84 rows: the rest of its share, once.
    l = shares[1]
    it = iter(l)
    got = [it.indices.tolist() for _, _ in zip(range(6), it)]
    state = l.state_dict()
    assert (state["epoch"], state["samples_consumed"]) == (0, 90), state  # 6 steps x 5 rows x 3 ranks
    fresh = stoker.Loader("synthetic:100,4", batch_size=5, sampler=kind, num_samples=250, drop_last=False,
                          rank=1, world_size=3, **extra)
    fresh.load_state_dict(state)
    rest = []
    it = iter(fresh)
    for _ in it:
        rest += it.indices.tolist()
    assert sum(got, []) + rest == orders[1], f"{kind}: the resumed share is not the rest of the draw"
    # Another sampler's state is refused: its count means nothing in this draw.
    try:
        stoker.Loader("synthetic:100,4", batch_size=5, rank=1, world_size=3).load_state_dict(state)
        raise AssertionError("a weighted state was loaded into a random sampler's loader")
    except ValueError as e:
        assert "the epoch's order would differ" in str(e), e
# rank= without world_size= is refused (it read the whole dataset as one rank of one).
try:
    stoker.Loader("synthetic:100,4", batch_size=16, rank=2)
    raise AssertionError("rank=2 without world_size was accepted")
except ValueError as e:
    assert "give world_size= too" in str(e), e
result(weighted_steps=weighted_steps, elche_batches=[len(r[1]) for r in runs], resumed=len(seen))
