"""The machine's memory at its peak while a command runs: what sizes a machine for a run.

    python benchmarks/peak_memory.py [--interval S] [--json FILE] -- COMMAND ...

Samples the machine's used memory (``MemTotal - MemAvailable`` of /proc/meminfo: every
process of the run -- the driver, the shards, Ray's and Spark's own -- and the page cache
it cannot give back) every ``--interval`` seconds while the command runs, and reports the
peak, the used memory before the command started (what the run did not cause) and when
the peak came, in seconds from the start. The command's output goes to this process's
stderr, its exit code is this script's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time


def used_bytes() -> int:
    """MemTotal - MemAvailable, in bytes. O(1)."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            info[name] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--json", help="write the figures to this file too")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given (after --)")
    before = used_bytes()
    peak, peak_at = before, 0.0
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=sys.stderr)
    done = threading.Event()

    def sample():
        nonlocal peak, peak_at
        while not done.wait(args.interval):
            u = used_bytes()
            if u > peak:
                peak, peak_at = u, time.monotonic() - t0

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    done.set()
    sampler.join()
    gb = 1e9
    out = {"command": " ".join(cmd), "exit_code": rc, "used_before_gb": round(before / gb, 3),
           "peak_used_gb": round(peak / gb, 3), "peak_at_s": round(peak_at, 1),
           "wall_s": round(time.monotonic() - t0, 1), "interval_s": args.interval}
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
