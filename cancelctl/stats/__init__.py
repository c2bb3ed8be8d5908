"""Statistics on arrays: small functions with explicit inputs (arrays or tidy frames in, numbers or
dataclasses out, as rliable), each with its own tests in tests/stats. Nothing here reads or writes a
file, prints, plots or touches MLflow: the report (`cancelctl.report`) hands them what it collected.

    samples        the input conventions: finite 1-d values, a seed for resampling
    intervals      Student's t CIs over seeds (the bootstrap's kept to compare), Wilson's score interval
                   for scores in [0, 1], the band of a mean curve
    paired         the paired t-test (the bootstrap-t's kept to compare), Holm's adjustment, seeds needed for a power
    improvement    rliable's probability of improvement P(X > Y) with Newcombe's score interval
    iqm            rliable's interquartile mean with the Tukey–McLaughlin interval
    profiles       rliable's performance profiles: fraction of runs above each score, bootstrap band
    crossing       Compute@Reward=κ and steps to κ: where a curve first reaches a threshold
    scaling        ScaleRL's compute-scaling fit R(C): asymptote A, efficiency B, midpoint C_mid per run
    curves         the shape of a curve: Jitter2, slope, late − early
    pass_at_k      pass@k from n samples per problem: Chen et al. 2021's unbiased estimator
    frames         the tidy metrics frame split per key, last values, a metric on a compute axis
    compute_match  the compute-matched protocol on logged compute
    evidence       the paired evidence for one claim on one group, per direction
    rates          how often runs collapse: an exact score test and the interval inverting it, the sign test
    survival       time to collapse: the log-rank test (exact permutation at few runs), restricted mean
    outcomes       claims on the monitor's alerts: collapse rate, time to collapse, alert order
    options        ComparisonOptions: how arms are compared (compute-match tolerance, α, power, minimum seeds)
    verdict_types  the Verdict row, the Judging of one report, the Stop that ended a run
    claim_values   a claim's number per run: the statistic of its metric kind on each run's curve
    verdict_rules  the paired claims' rules: one claim on one group, a trend along a grid axis
    verdicts       the claims of a sweep judged per group (dispatch on the claim's kind), Holm across the report
    sequential     the safe t-test's e-process: anytime-valid decisions at every look (sweep --until-decided)
    sequential_verdicts  the claims of a sweep run until decided, judged at every look, Bonferroni on e-values

Sources (docs/bibliography.md): [D] (DFPO), [H] (App. D: alert order), ScaleRL = arXiv 2510.13786,
rliable = Agarwal et al. 2021, arXiv 2108.13264, Chen et al. 2021 = arXiv 2107.03374 (pass@k); what each
table computes: docs/statistics.md. Where a paper leaves a choice open
the decision is stated in the docstring.
"""
