"""Sweep report: compute-matched tables, intervals and tests over seeds, Compute@Reward, Jitter2, plots.

What each table means: docs/statistics.md and [D] §4.5, §5, Tables 1–4. The numbers come from
`cancelctl.stats`; this package selects, groups, formats and writes. Modules, in data order:

- `sweep_report`: `report_sweep`, what `cancelctl report` calls — find the sweep in the work dir,
  collect it from MLflow, build the report;
- `build`: `build_report(CollectedSweep, ReportOptions)`, the collected sweep in, the report folder out;
- `options`: `ReportOptions`, the report's settings in one frozen object, built where the verb reads them;
- `model`: `Report`, `ReportTable`, and the collected sweep prepared once (`prepare_sweep`);
- `tables`, `thresholds`: the tables (thresholds: Compute@Reward, steps to κ, the default κ);
- `plots`: the PNG figures;
- `claims`: the claims table's cells (the verdicts are `cancelctl.stats.verdicts`);
- `alerts`, `screening`: what the in-job monitor left, and the points a report refuses to average;
- `formatting` and the renderers `render_terminal` (rich), `render_markdown`, `render_html`,
  `render_data` (CSV/JSON);
- `live/`: `cancelctl watch`, the live view of a sweep read from its run folders.

Importing this package imports none of its modules (`live` is on the launcher's path: it must not
pay for pandas and scipy).
"""
