"""python3 -m stoker_probe --publish ADDR [--interval-ms N] (script.py | -m module) ARGS...

Runs a training script unchanged, watching every torch.utils.data.DataLoader it iterates:
each loader is named by the line of the script that iterates it. Under torchrun:
`torchrun --nproc-per-node 4 -m stoker_probe --publish monitor:9400 train.py ...`.
"""

import argparse
import os
import runpy
import sys

from . import _patch, shutdown


def _split(argv):
    """(the probe's own options, module, script, the rest): everything after `-m MODULE` or the
    script is the program's, options too (argparse's REMAINDER left `-m train --epochs 3`'s
    `--epochs 3` to the probe, which refused it)."""
    own, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token == "-m":
            return own, (argv[i + 1] if i + 1 < len(argv) else None), None, argv[i + 2:]
        if token.startswith("-m") and not token.startswith("--"):
            return own, token[2:], None, argv[i + 1:]
        if not token.startswith("-"):
            return own, None, token, argv[i + 1:]
        own.append(token)
        if token in ("--publish", "--interval-ms") and i + 1 < len(argv):
            own.append(argv[i + 1])
            i += 1
        i += 1
    return own, None, None, []


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m stoker_probe",
        description="Run a PyTorch training script unchanged and publish Stoker telemetry for every DataLoader it iterates.",
    )
    parser.add_argument("--publish", default=os.environ.get("STOKER_PROBE_PUBLISH"),
                        help="HOST:PORT of `stoker monitor` or the workbench's Monitor, file:PATH, or listen:PORT "
                             "(monitors dial in); default $STOKER_PROBE_PUBLISH")
    parser.add_argument("--interval-ms", type=int, default=500, help="one record per loader this often (default 500)")
    parser.usage = "python3 -m stoker_probe [--publish ADDR] [--interval-ms N] (script.py | -m module) ARGS..."
    own, module, script, rest = _split(sys.argv[1:] if argv is None else list(argv))
    a = parser.parse_args(own)
    a.module, a.script, a.args = module, script, rest
    if not a.publish:
        parser.error("--publish is required (or set STOKER_PROBE_PUBLISH)")
    if a.interval_ms <= 0:
        parser.error("--interval-ms must be positive")
    if not a.module and not a.script:
        parser.error("give the training script (or -m MODULE)")
    try:
        _patch.install(a.publish, a.interval_ms)
    except (ValueError, OSError) as e:
        print(f"error: --publish {a.publish}: {e}", file=sys.stderr)
        return 2
    try:
        if a.module:
            sys.argv = [a.module] + a.args
            runpy.run_module(a.module, run_name="__main__", alter_sys=True)
        else:
            if not os.path.isfile(a.script):
                print(f"error: {a.script}: no such script", file=sys.stderr)
                return 2
            sys.argv = [a.script] + a.args
            sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
            runpy.run_path(a.script, run_name="__main__")
    finally:
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
