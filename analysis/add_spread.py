"""Add the spread across topologies (analysis/spread.py) to a run analysed before it
existed, without Spark:

    python -m analysis.add_spread RUN_DIR [SUMMARY_JSON]

e.g. `python -m analysis.add_spread runs/x results/x/summary.json` for a committed copy.
"""

from __future__ import annotations

from pathlib import Path


def main(argv: list[str]) -> int:
    """`python -m analysis.add_spread RUN_DIR [SUMMARY_JSON]`: add the spread to a run analysed
    before it existed, without Spark: the CSV columns in RUN_DIR/metrics and the `spread`
    key in SUMMARY_JSON (default RUN_DIR/summary.json; e.g. the committed results/ copy of
    that run). Only adds: every other value stays as it is."""
    import json
    import sys

    from analysis.output import write_json
    from analysis.spread import add_spread
    if len(argv) not in (1, 2):
        print(main.__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    summary_path = Path(argv[1]) if len(argv) == 2 else run_dir / "summary.json"
    if not (run_dir / "metrics").is_dir() or not summary_path.is_file():
        print(f"error: need {run_dir}/metrics and {summary_path}", file=sys.stderr)
        return 2
    summary = json.loads(summary_path.read_text())
    summary["spread"] = add_spread(run_dir / "metrics")
    write_json(summary, summary_path)
    print(f"spread of {summary['spread']['samples']} topologies -> {summary_path}")
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
