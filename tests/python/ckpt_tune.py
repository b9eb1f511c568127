"""stoker.ckpt (inspect, convert with progress and cancel, verify), stoker.plan and stoker.tune,
called in process from Python on real files."""

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import torch

import stoker
from common import result

tmp = tempfile.mkdtemp()
try:
    # A safetensors file as the official layout has it, written by hand (no safetensors module here).
    tensors = {"embed.weight": torch.randn(64 * 1024, 384), "head.bias": torch.randn(10), "head.weight": torch.randn(10, 64)}
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = tensors[name].numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    src = os.path.join(tmp, "model.safetensors")
    with open(src, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

    info = stoker.ckpt.inspect(src)
    assert info["format"] == "safetensors" and {t["name"] for t in info["tensors"]} == set(tensors), info

    calls = []
    report = stoker.ckpt.convert(src, os.path.join(tmp, "ranks"), "ranks:2",
                                 progress=lambda done, total, item: calls.append((done, total)))
    assert report and calls and calls[-1][0] == calls[-1][1] > 0, calls[-3:]
    ranks = stoker.ckpt.inspect(os.path.join(tmp, "ranks"))
    assert ranks["world_size"] == 2, ranks
    assert stoker.ckpt.verify(src, os.path.join(tmp, "ranks"))["equal"] is True

    half = stoker.ckpt.convert(os.path.join(tmp, "ranks"), os.path.join(tmp, "f16"), "single", dtype="f16")
    diff = stoker.ckpt.verify(src, os.path.join(tmp, "f16"))
    assert diff["equal"] is False and diff["first_difference"], diff

    # Cancelled from the progress callback: CancelledError, and no output looks complete.
    try:
        stoker.ckpt.convert(src, os.path.join(tmp, "cancelled"), "hf", jobs=1, memory_budget="8MiB",
                            progress=lambda d, t, i: True)
        raise AssertionError("the conversion was not cancelled")
    except stoker.CancelledError as e:
        assert "cancel" in str(e).lower(), e
    assert not os.path.exists(os.path.join(tmp, "cancelled", "model.safetensors"))
    try:
        stoker.ckpt.inspect(os.path.join(tmp, "nothing.safetensors"))
        raise AssertionError("a missing file was inspected")
    except (FileNotFoundError, ValueError) as e:
        assert "nothing.safetensors" in str(e)

    # The planner: DistributedSampler's indices, and a resume onto another world size.
    p = stoker.plan(100, 4, seed=5, epoch=2)
    s = torch.utils.data.DistributedSampler(range(100), num_replicas=4, rank=1, seed=5)
    s.set_epoch(2)
    assert p["ranks"][1]["indices"] == list(s)
    resumed = stoker.plan(100, 3, seed=5, epoch=2, resume_from=40)
    assert sorted(sum((r["indices"] for r in resumed["ranks"]), [])) != []

    # The auto-tuner within a small budget returns options a Loader takes.
    tuned = stoker.tune("synthetic:4096,1x28x28,f32,5", budget_s=4, batch_size=64)
    assert tuned["options"]["batch_size"] > 0 and tuned["trials"], tuned.keys()
    loader = stoker.Loader("synthetic:4096,1x28x28,f32", options=tuned["options"])
    assert sum(batch[0].shape[0] for batch in loader) > 0
    # The options as `stoker tune --save-options` (or the workbench) saves them, read back by
    # Loader.from_options; keywords given beside the file win over it.
    saved = os.path.join(tmp, "tuned.json")
    with open(saved, "w") as f:
        json.dump(tuned["options"], f)
    again = stoker.Loader.from_options(saved, "synthetic:4096,1x28x28,f32")
    for knob in ("batch_size", "num_workers", "prefetch"):
        assert again.options[knob] == tuned["options"][knob], (knob, again.options[knob], tuned["options"][knob])
    assert stoker.Loader.from_options(saved, "synthetic:4096,1x28x28,f32", batch_size=7).options["batch_size"] == 7
    # Ctrl-C during a tune or a conversion (the script's thread waits in the C call) stops it at its
    # next safe point and raises KeyboardInterrupt. It used to come once the whole tune was done, and
    # a conversion with a progress callback lost it (ctypes swallows an exception in a callback).
    def interrupted_after(code, seconds, *args):
        child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time, stoker\n"
                                  "signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the parent ignored\n"
                                  "try:\n" + code + """
    print("returned")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
""", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "started"
        time.sleep(seconds)
        child.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, err = child.communicate(timeout=60)
        took = time.monotonic() - interrupted
        assert out.strip() == "KeyboardInterrupt" and "Exception ignored" not in err and took < 10, (code, out, err[-2000:], took)
        return took
    tune_stop_s = interrupted_after("""    print("started", flush=True)
    stoker.tune("synthetic:4096,1x28x28,f32,5", budget_s=60, batch_size=64)""", 3)
    started = ("    def slowly(done, total, item):\n"
               "        if not slowly.said: print('started', flush=True); slowly.said = True\n"
               "        time.sleep(0.5)\n"
               "    slowly.said = False\n")
    convert_stop_s = interrupted_after(started + "    stoker.ckpt.convert(sys.argv[1], sys.argv[2], 'hf', jobs=1, memory_budget='8MiB', progress=slowly)", 1,
                                      src, os.path.join(tmp, "interrupted"))
    result(tune_stopped_after_sigint_s=round(tune_stop_s, 2), convert_stopped_after_sigint_s=round(convert_stop_s, 2), progress_calls=len(calls), tune_trials=len(tuned["trials"]), confidence=tuned["confidence"])
finally:
    shutil.rmtree(tmp, ignore_errors=True)
