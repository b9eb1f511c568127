"""stoker.Loader(publish=...) sends the core's telemetry records (source "stoker", per-stage times,
the loader's name, rank and world size) -- the records `stoker monitor` and the workbench's
Monitor read -- and STOKER_PUBLISH does the same without a change to the script."""

import json
import os
import subprocess
import sys
import tempfile

import stoker
from common import result

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "records.jsonl")
    loader = stoker.Loader("synthetic:4000,3x32x32,f32,30", batch_size=100, shuffle=True, num_workers=2,
                           loading_mode="streaming", telemetry_interval_ms=50, publish=f"file:{path}", name="train")
    for epoch in range(2):
        for x, y in loader:
            pass
    info = loader.describe()
    loader.close()  # flushes what is queued
    records = [json.loads(line) for line in open(path) if line.strip()]
    assert records, "no telemetry record was published"
    assert all(r["source"] == "stoker" and r["loader"] == "train" for r in records), records[0]
    staged = [r for r in records if r.get("stages_ms")]
    assert staged and {"read", "collate"} <= set(staged[-1]["stages_ms"]), staged[-1:]
    assert {r["epoch"] for r in records} == {0, 1}, {r["epoch"] for r in records}
    # What the Monitor's "Tune in Loader" hands to the Loader workspace: the spec and every knob.
    assert records[-1]["dataset"].startswith("synthetic:4000") and records[-1]["options"]["batch_size"] == 100
    # describe() ran before close() flushed the queue: what it counted as sent is in the file.
    assert info["telemetry"]["dropped"] == 0 and len(records) >= info["telemetry"]["sent"], info["telemetry"]

    # STOKER_PUBLISH: an unchanged script publishes too (here under torchrun's RANK / WORLD_SIZE).
    env_path = os.path.join(tmp, "env.jsonl")
    env = dict(os.environ, STOKER_PUBLISH=f"file:{env_path}", RANK="1", WORLD_SIZE="2")
    script = ("import stoker\nl = stoker.Loader('synthetic:2000,16', batch_size=50, telemetry_interval_ms=20)\n"
              "for _ in range(2):\n    for b in l: pass\nl.close()\n")
    subprocess.run([sys.executable, "-c", script], env=env, check=True)
    env_records = [json.loads(line) for line in open(env_path) if line.strip()]
    assert env_records and all(r["rank"] == 1 for r in env_records), env_records[:1]
    result(records=len(records), staged=len(staged), env_records=len(env_records))
