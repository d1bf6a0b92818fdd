"""Spark (through RayDP) analysis of scribe-emu runs: metrics CSVs, figures, summary, report.

Entry points: `run_analysis(run_dir, spark, refs=None, scenario_meta=None, extra=None)` and
`analysis.report.write_report(run_dir)`. Schemas and metric definitions: docs/analysis.md.
"""

from analysis.run import run_analysis
from analysis.schema import AnalysisOptions, Traffic

__all__ = ["AnalysisOptions", "Traffic", "run_analysis"]
