"""Shared test set-up.

Ray workers import test-only protocol modules (tests/emu_protocols.py) by name when they
unpickle a stack factory, so the repository root and tests/ must be on their PYTHONPATH;
workers inherit the environment of the process that starts Ray.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)
_inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), *_inherited])
