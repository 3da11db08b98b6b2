"""Eval metrics with confidence intervals, regression gates, plots and the HTML/Markdown report.

The path of an eval: heldout.py loads the tasks; episodes.py runs them (a checkpoint or an endpoint)
into one row per episode; metrics.py and stats.py turn rows into numbers with intervals; build.py
assembles report.json (with gates.py's verdicts); write.py writes it with plots.py's PNGs and
render.py's report.md and report.html, and regenerates a run's report.
"""
