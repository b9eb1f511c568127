"""stoker.Loader used wrongly or interrupted: every case a clear Python exception, never a crash."""

import atexit
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import torch

import stoker
from common import result

HERE = os.path.dirname(os.path.abspath(__file__))
checked = []


def expect(exc, fn, *words):
    try:
        fn()
    except exc as e:
        text = str(e)
        for w in words:
            assert w in text, f"{exc.__name__} without {w!r}: {text}"
        checked.append(exc.__name__)
        return text
    raise AssertionError(f"no {exc.__name__} raised (wanted one naming {words})")


def waiting_in_another_thread(spec):
    """A slow loader (one batch at a time) whose epoch another thread waits in, and that thread."""
    loader = stoker.Loader(spec, batch_size=1, num_workers=1)
    thread = threading.Thread(target=lambda: sum(1 for _ in loader), daemon=True)
    thread.start()
    time.sleep(0.25)
    return loader, thread


tmp = tempfile.mkdtemp()
try:
    # An unknown spec, a missing folder, an unknown keyword, a Python Dataset object, bad values.
    expect(ValueError, lambda: stoker.Loader("nosuchkind:/x"), "nosuchkind")
    expect(FileNotFoundError, lambda: stoker.Loader(f"imagefolder:{tmp}/missing", transforms="Resize(32),CenterCrop(32)"),
           f"{tmp}/missing")
    expect(TypeError, lambda: stoker.Loader("fashion-mnist", batchsize=4), "batchsize")
    expect(TypeError, lambda: stoker.Loader("fashion-mnist", collate_fn=list), "collate_fn")
    expect(TypeError, lambda: stoker.Loader(torch.utils.data.Dataset()), "Dataset", "imagefolder:")
    expect(ValueError, lambda: stoker.Loader("fashion-mnist", batch_size=0), "batch_size")
    expect(ValueError, lambda: stoker.Loader("fashion-mnist", loading_mode="sometimes"), "loading_mode")
    expect(ValueError, lambda: stoker.Loader((torch.zeros(4, 2), torch.zeros(5))), "dim 0")
    expect(ValueError, lambda: stoker.Loader("fashion-mnist", transforms="Resize(8)"), "transforms")
    expect(FileNotFoundError, lambda: stoker.Loader("fashion-mnist", options=f"{tmp}/none.json"), "none.json")
    expect(ValueError, lambda: stoker.Loader("fashion-mnist", options="no_such_preset"), "no_such_preset")
    # Values that were taken as something else: rank=1.5 read rank 1's share, as_dict="no" gave
    # dicts, and num_samples with the random sampler left the epoch the dataset's size.
    expect(TypeError, lambda: stoker.Loader("fashion-mnist", rank=1.5, world_size=2), "rank=", "1.5")
    expect(TypeError, lambda: stoker.Loader("fashion-mnist", rank=0, world_size=2.0), "world_size=")
    expect(ValueError, lambda: stoker.Loader("fashion-mnist", rank=0, world_size=2**31 - 1), "at most 1048576")
    expect(TypeError, lambda: stoker.Loader("fashion-mnist", as_dict="no"), "as_dict=", "'no'")
    expect(ValueError, lambda: stoker.Loader("fashion-mnist", num_samples=100), "num_samples", "'random'")
    assert len(stoker.Loader("fashion-mnist", rank=np.int64(1), world_size=torch.tensor(2), batch_size=1000)) == 30
    assert len(stoker.Loader("fashion-mnist", sampler="random_with_replacement", num_samples=100, batch_size=10)) == 10

    # A corrupt JPEG without skip_bad_samples: raised from the for loop, naming the file.
    from PIL import Image
    for cls in ("a", "b"):
        os.makedirs(f"{tmp}/photos/{cls}")
        for i in range(4):
            Image.fromarray(np.full((40, 48, 3), 40 * i, np.uint8)).save(f"{tmp}/photos/{cls}/{i}.jpg")
    with open(f"{tmp}/photos/b/2.jpg", "r+b") as f:  # the header survives, the scan does not
        f.seek(200)
        f.write(b"\xff\xd9" * 8)
        f.truncate(240)
    spec = f"imagefolder:{tmp}/photos"
    loader = stoker.Loader(spec, batch_size=2, transforms="Resize(32),CenterCrop(32)", num_workers=2)

    def iterate():
        for _ in loader:
            pass
    expect(ValueError, iterate, "2.jpg")
    # ... and skipped and counted with skip_bad_samples.
    skipping = stoker.Loader(spec, batch_size=2, transforms="Resize(32),CenterCrop(32)", skip_bad_samples=True)
    served = sum(x.shape[0] for x, _ in skipping)
    assert served == 7 and skipping.describe()["last_epoch"]["skipped"] == 1, served
    # A state saved after every batch of an epoch (before StopIteration), one of them short by a
    # skipped sample: it is the next epoch's start. Counted by the rows that came, it said epoch 0
    # at sample 7, and a new process served sample 7 again; a count past the epoch's samples (the
    # last step's padding on other world sizes) was refused when loaded.
    def skipping_loader():
        return stoker.Loader(spec, batch_size=2, transforms="Resize(32),CenterCrop(32)", skip_bad_samples=True,
                             shuffle=False, num_workers=1)
    first = skipping_loader()
    it = iter(first)
    rows = sum(next(it)[0].shape[0] for _ in range(4))
    state = first.state_dict()
    assert rows == 7 and (state["epoch"], state["samples_consumed"]) == (1, 0), (rows, state)
    resumed = skipping_loader()
    resumed.load_state_dict(dict(state, epoch=0, samples_consumed=9))  # as saved before this rule
    assert resumed.state_dict()["epoch"] == 1 and sum(x.shape[0] for x, _ in resumed) == 7
    expect(ValueError, lambda: resumed.load_state_dict(dict(state, samples_consumed=-2)), "samples_consumed -2")
    # world_size= without rank= (mp.spawn sets no RANK): every process was rank 0.
    expect(ValueError, lambda: stoker.Loader(spec, world_size=4, transforms="Resize(32),CenterCrop(32)"),
           "world_size=4 without rank=", "rank 0's share")

    # A tuple of tensors: taken without a copy, yielded as a tuple.
    x = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    y = torch.arange(10)
    held = stoker.Loader((x, y), batch_size=5, num_workers=0)
    batches = list(held)
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert all(torch.equal(b[0], x[b[1]]) for b in batches)
    # A dict of tensors yields dicts; a tensor that requires grad is taken too (detached, no copy).
    named = list(stoker.Loader({"x": x.requires_grad_(), "y": y}, batch_size=4, drop_last=True))
    assert len(named) == 2 and set(named[0]) == {"x", "y"}
    assert isinstance(list(stoker.Loader((x, y), batch_size=4, as_dict=True))[0], dict)
    x = x.detach()
    # One tensor yields 1-tuples, three yield 3-tuples (the two-field case has its own fast path).
    assert [tuple(t.tolist() for t in b) for b in stoker.Loader(y, batch_size=5)] == [([0, 1, 2, 3, 4],), ([5, 6, 7, 8, 9],)]
    triples = list(stoker.Loader((x, y, y * 2), batch_size=5))
    assert all(len(b) == 3 and torch.equal(b[0], x[b[1]]) and torch.equal(b[2], b[1] * 2) for b in triples)
    # state_dict counts the samples served; after a short last batch the epoch is done (the next
    # epoch's start), before StopIteration too.
    counted = stoker.Loader((x, y), batch_size=4)
    it = iter(counted)
    assert [next(it)[0].shape[0] for _ in range(2)] == [4, 4] and counted.state_dict()["samples_consumed"] == 8
    assert next(it)[0].shape[0] == 2
    assert (counted.state_dict()["epoch"], counted.state_dict()["samples_consumed"]) == (1, 0), counted.state_dict()

    # A batch kept past the next ones stays intact (its buffer is not reused while Python holds it).
    keep = stoker.Loader("fashion-mnist", batch_size=256, num_workers=2, reuse_buffers=True)
    it = iter(keep)
    first_x, _ = next(it)
    snapshot = first_x.clone()
    for _ in range(20):
        next(it)
    assert torch.equal(first_x, snapshot), "a batch Python still held was overwritten"
    it.close()

    # 200 iterators abandoned mid-epoch: workers stopped, memory freed (RSS flat).
    def rss_mb():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS")).split()[1]) / 1024
    many = stoker.Loader("fashion-mnist", batch_size=128, num_workers=2)
    for i in range(200):
        it = iter(many)
        for _ in range(3):
            next(it)
        if i == 20:
            rss_20, tasks_20 = rss_mb(), len(os.listdir("/proc/self/task"))
    del it
    rss_200 = rss_mb()
    assert rss_200 - rss_20 < 40, f"RSS grew {rss_200 - rss_20:.0f} MiB over 180 abandoned iterators"
    # +1: the next epoch's order is drawn on a short-lived thread, which may be alive at either count;
    # on a loaded machine the last two epochs' draw threads may both still be exiting, so the count
    # is given a second to settle (a leak, a thread an iterator, would stay ~180 up).
    deadline = time.monotonic() + 1
    while (tasks_200 := len(os.listdir("/proc/self/task"))) > tasks_20 + 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tasks_200 <= tasks_20 + 1, f"threads grew over 180 abandoned iterators: {tasks_20} -> {tasks_200}"
    many.close()

    # fork() after import stoker (and after a loader ran): a DataLoader with workers still works.
    peer = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=5, num_workers=2)
    assert sum(len(b[1]) for b in peer) == 10
    pid = os.fork()
    if pid == 0:
        os._exit(0 if len(list(stoker.Loader((x, y), batch_size=5))) == 2 else 3)
    assert os.waitpid(pid, 0)[1] == 0, "a loader in a forked child failed"

    # Ctrl-C mid-epoch: KeyboardInterrupt within a second, no thread of the loader left running.
    child = textwrap.dedent("""
        import gc, os, sys, stoker
        before = len(os.listdir("/proc/self/task"))
        loader = stoker.Loader("synthetic:100000,3x64x64,f32,2000", batch_size=64, num_workers=2,
                               loading_mode="streaming")
        print("ready", flush=True)
        try:
            for batch in loader:
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        else:
            sys.exit(5)
        del loader  # the persistent workers go with the loader
        gc.collect()
        print("threads", len(os.listdir("/proc/self/task")) - before, flush=True)
    """)
    # Both per-batch paths: the extension stoker._batches (where built) and ctypes.
    latencies = []
    for ctypes_path in ("0", "1"):
        p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "STOKER_PYTHON_CTYPES": ctypes_path})
        assert p.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().split()
        latencies.append(time.monotonic() - sent)
        left = p.stdout.readline().split()
        assert p.wait(timeout=10) == 0 and line == ["interrupted"], (ctypes_path, line)
        assert left[0] == "threads" and int(left[1]) <= 0, f"threads still running after Ctrl-C: {left}"
        assert latencies[-1] < 1.0, f"KeyboardInterrupt took {latencies[-1]:.2f} s (STOKER_PYTHON_CTYPES={ctypes_path})"
    latency = max(latencies)

    # close() while another thread waits in next(), from a signal handler mid-wait, and at exit
    # with a daemon thread waiting: that loop ends, nothing is freed under it (before handles were
    # ids, each of these was a use-after-free: a segfault).
    closer = textwrap.dedent("""
        import signal, threading, time, stoker
        SPEC = "synthetic:1000,16,u8,0,200000"  # 0.2 s a sample: next() waits
        out = {}
        def iterate(loader, key):
            n = 0
            try:
                for _ in loader:
                    n += 1
                out[key] = ("ended", n)
            except Exception as e:
                out[key] = ("error", repr(e))
        def slow(spec=SPEC):
            return stoker.Loader(spec, batch_size=2, num_workers=2, loading_mode="streaming")
        loader = slow()
        t = threading.Thread(target=iterate, args=(loader, "thread"))
        t.start()
        time.sleep(0.5)
        closed = time.monotonic()
        loader.close()
        t.join(5)
        print("thread", not t.is_alive(), out.get("thread", ("?",))[0], round(time.monotonic() - closed, 3), flush=True)
        loader = slow()
        signal.signal(signal.SIGALRM, lambda *a: loader.close())
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        iterate(loader, "signal")
        print("signal", out["signal"][0], flush=True)
        # Its first batch takes 4 s: it waits in next() when the process exits, as this case means.
        # (A daemon thread that frees a torch tensor while the interpreter finalizes aborts in
        # torch 1.13's dealloc, which takes the GIL back there: any tensor, not Stoker's.)
        threading.Thread(target=iterate, args=(slow("synthetic:1000,16,u8,0,2000000"), "daemon"), daemon=True).start()
        time.sleep(0.5)
        print("exiting", flush=True)
    """)
    for ctypes_path in ("0", "1"):
        r = subprocess.run([sys.executable, "-c", closer], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "STOKER_PYTHON_CTYPES": ctypes_path})
        lines = r.stdout.split("\n")
        assert r.returncode == 0, (ctypes_path, r.returncode, r.stdout, r.stderr[-2000:])
        thread = lines[0].split()
        assert thread[:3] == ["thread", "True", "ended"] and float(thread[3]) < 1.0, (ctypes_path, lines)
        assert lines[1:3] == ["signal ended", "exiting"], (ctypes_path, lines)
    checked.append("close while another thread waits")

    # A module built for another torch: refused at import, naming both versions.
    fake = os.path.join(tmp, "fake_torch", "torch")
    os.makedirs(fake)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write("__version__ = '2.11.0+cu130'\nclass version:\n    cuda = '13.0'\n")
    os.makedirs(os.path.join(fake, "utils"))
    with open(os.path.join(fake, "utils", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(fake, "utils", "dlpack.py"), "w") as f:
        f.write("")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(fake) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", "import stoker"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "ImportError" in r.stderr, r.stderr
    built = stoker._native._build_info.TORCH_VERSION
    assert "2.11.0+cu130" in r.stderr and built in r.stderr, r.stderr
    checked.append("torch mismatch")
    # A build against a CUDA libtorch in a process whose torch (of the same release) has no CUDA.
    info = stoker._native._build_info
    saved = info.CUDA
    try:
        info.CUDA = True
        expect(ImportError, lambda: stoker._native.check_torch(imported=built, imported_cuda=False),
               "built against a CUDA libtorch", built, "has no CUDA")
        stoker._native.check_torch(imported=built, imported_cuda=True)  # the same release with CUDA: fine
    finally:
        info.CUDA = saved
    checked.append("CUDA build, torch without CUDA")

    # A partial options= dict or file keeps DataLoader's defaults for what it leaves out: with the
    # core's (batch 32, shuffle, drop_last) a 10-sample dataset yielded no batch at all.
    with open(f"{tmp}/partial.json", "w") as f:
        f.write('{"num_workers": 0}')
    for options in ({"num_workers": 0}, f"{tmp}/partial.json"):
        partial = stoker.Loader("synthetic:10,2", options=options)
        assert (partial.options["batch_size"], partial.options["shuffle"], partial.options["drop_last"]) == (1, False, False)
        assert sum(1 for _ in partial) == 10
        partial.close()
    checked.append("partial options")
    # numpy and torch numbers, and a torch tensor of weights (as WeightedRandomSampler takes them),
    # are their values (they raised "Object of type int64 is not JSON serializable").
    typed = stoker.Loader("synthetic:12,2", batch_size=np.int64(4), seed=np.int64(3), drop_last=np.bool_(False),
                          sampler="weighted", weights=torch.ones(12), num_samples=np.int32(8), num_workers=0)
    assert typed.options["batch_size"] == 4 and len(typed) == 2, typed.options
    typed.close()
    checked.append("numpy values")
    # A bool mask as a field: torch 1.13's DLPack has no bool; it comes back as bool.
    masks = torch.tensor([True, False, True, True])
    m = stoker.Loader((torch.arange(4), masks), batch_size=4, num_workers=0)
    got = next(iter(m))
    assert got[1].dtype == torch.bool and torch.equal(got[1], masks), got
    m.close()
    checked.append("bool field")
    # drop_last: a state saved after the epoch's last whole batch is the next epoch's start (it
    # stayed at epoch 0, and the resumed for yielded nothing).
    mk = lambda: stoker.Loader("synthetic:11,1", batch_size=4, drop_last=True, num_workers=0)
    a = mk()
    it = iter(a)
    next(it), next(it)
    state = a.state_dict()
    assert (state["epoch"], state["samples_consumed"]) == (1, 0), state
    b = mk()
    b.load_state_dict(dict(state, epoch=0, samples_consumed=8))  # one saved before this rule
    assert sum(1 for _ in b) == 2
    a.close(), b.close()
    checked.append("drop_last epoch end")
    # An El Che state (one rank's count) is refused mid-epoch by a loader without El Che too.
    plain = stoker.Loader("synthetic:40,1", batch_size=4, rank=0, world_size=2, num_workers=0)
    expect(ValueError, lambda: plain.load_state_dict(dict(plain.state_dict(), samples_consumed=8, split="step_ms")),
           "El Che", "epoch boundaries")
    plain.close()
    # An exception in a progress callback is raised as itself (it was a bare CancelledError).
    def failing(done, total, item):
        raise ZeroDivisionError("in the callback")
    expect(ZeroDivisionError, lambda: stoker.tune("synthetic:200,4", 2, progress=failing), "in the callback")
    # File names that are not UTF-8: a path is passed as its bytes (ckpt.inspect raised
    # UnicodeEncodeError), and describe() of a folder whose skipped sample has such a name works
    # (strict JSON made it, and so every later Loader over the folder, fail).
    odd = os.path.join(os.fsencode(tmp), b"caf\xe9")
    os.makedirs(odd + b"/c")
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, buffer)
    with open(odd + b"/model.pt", "wb") as f:
        f.write(buffer.getvalue())
    assert stoker.ckpt.inspect(os.fsdecode(odd + b"/model.pt"))["tensors"][0]["name"] == "w"
    Image.fromarray(np.zeros((40, 48, 3), np.uint8)).save(os.fsdecode(odd + b"/c/a.jpg"))
    with open(odd + b"/c/b-\xe9.jpg", "wb") as f:
        f.write(b"\xff\xd8\xff not a jpeg")
    odd_loader = stoker.Loader(b"imagefolder:" + odd, batch_size=2, transforms="Resize(32),CenterCrop(32)", skip_bad_samples=True)
    assert sum(len(y) for _, y in odd_loader) == 1
    assert "caf\ufffd/c/b-\ufffd.jpg" in odd_loader.describe()["last_epoch"]["first_skipped"]
    odd_loader.close()
    checked.append("non-UTF-8 names")
    # A fork while another thread waits in next(): the child exits at once. The parent's call in
    # flight was counted in the child too, and its exit waited the whole 2 s quiesce.
    slow, _ = waiting_in_another_thread("synthetic:20,4,f32,0,300000")
    forked = time.monotonic()
    pid = os.fork()
    if pid == 0:
        # The loaders' close and the quiesce, as at exit; not sys.exit: SystemExit would run this
        # script's `finally` in the child and remove the parent's temporary folder.
        atexit._run_exitfuncs()
        os._exit(0)
    os.waitpid(pid, 0)
    child_s = time.monotonic() - forked
    assert child_s < 1.5, f"the forked child took {child_s:.2f} s to exit"
    slow.close()
    checked.append("fork")
    # A new `for` while another thread waits in the loader's running epoch: that loop ends and
    # the new epoch starts (it failed with "epoch 0 is still being iterated" while the other
    # thread's wait had not yet returned).
    replaced, other = waiting_in_another_thread("synthetic:50,4,f32,0,100000")
    replaced.set_epoch(0)  # not the epoch made ahead: the running one must be over first
    assert len(next(iter(replaced))) == 2
    other.join(5)
    assert not other.is_alive()
    replaced.close()
    checked.append("replaced from another thread")
    result(cases=len(checked), ctrl_c_latency_s=round(latency, 3), rss_growth_mb=round(rss_200 - rss_20, 1),
           forked_child_exit_s=round(child_s, 2))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
