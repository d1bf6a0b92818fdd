"""Spark (through RayDP) analysis of scribe-emu runs: metrics CSVs, figures, summary, report.

Entry points: `run_analysis(run_dir, spark, refs=None, scenario_meta=None, extra=None)` and
`analysis.report.write_report(run_dir)`. Schemas and metric definitions: docs/analysis.md.

The names are imported on first use: Spark's Python workers import this package to run
the numpy kernels, and should not pay for matplotlib (figures) there.
"""

__all__ = ["AnalysisOptions", "Traffic", "run_analysis"]


def __getattr__(name: str):
    if name == "run_analysis":
        from analysis.run import run_analysis
        return run_analysis
    if name in ("AnalysisOptions", "Traffic"):
        from analysis import schema
        return getattr(schema, name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
