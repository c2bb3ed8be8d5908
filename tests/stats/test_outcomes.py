"""Outcome claims from the monitor's alerts (`cancelctl.stats.outcomes` through `judge_claims`): a
stop is a collapse, a run another rule stopped first is censored, every number traced by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from cancelctl.spec.claims import ClaimSpec
from cancelctl.stats.outcomes import Stop, run_outcomes
from cancelctl.stats.verdicts import judge_claims

BUDGET = 100


def claim(kind: str, **metric) -> ClaimSpec:
    data = {"id": kind, "source": "[H] App. D", "statement": "s", "direction": "higher", "arm": "bad", "versus": "ok",
            "metric": {"kind": kind, "rule": "entropy_collapse", **metric}}
    if kind == "alert_order":
        data.update(versus=None, metric={"kind": kind, "rule": "entropy_collapse", "first": "mismatch_growth"})
    if kind == "time_to_collapse":
        data["direction"] = "lower"
    return ClaimSpec.model_validate(data)


def sweep(stopped_at: dict[int, int], seeds=range(5), extra_alerts=()):
    """Arm 'bad' stopped by entropy_collapse at stopped_at[seed] (mismatch_growth warned 10 steps
    before), arm 'ok' never alerted; every run logs reward and compute up to its end."""
    runs, points, alerts, stops = [], [], [], {}
    for arm in ("ok", "bad"):
        for seed in seeds:
            run_id = f"{arm}-s{seed}"
            runs.append({"run_id": run_id, "arm": arm, "group": "", "seed": seed, "G": 4})
            end = stopped_at.get(seed, BUDGET) if arm == "bad" else BUDGET
            points += [(run_id, s, "critic/score/mean", 0.5) for s in range(1, end + 1)]
            if arm == "bad" and seed in stopped_at:
                stops[run_id] = Stop("entropy_collapse", end)
                alerts += [(run_id, "mismatch_growth", end - 10, "warn"), (run_id, "entropy_collapse", end, "stop")]
    alerts += list(extra_alerts)
    return (pd.DataFrame(runs), pd.DataFrame(points, columns=["run_id", "step", "key", "value"]),
            pd.DataFrame(alerts, columns=["run_id", "rule", "step", "action"]), stops)


def judge(claims, stopped_at, **kw):
    runs, metrics, alerts, stops = sweep(stopped_at, **kw)
    return judge_claims(claims, runs, metrics, alerts=alerts, stops=stops)


def test_collapse_rate_counts_every_run():
    [v] = judge([claim("collapse_rate")], {0: 40, 1: 55, 2: 70, 3: 90})
    assert v.status == "supported" and v.test == "exact score (unconditional)"  # the only row: Holm changes nothing
    assert (v.n_seeds, v.n_versus, v.arm_mean, v.versus_mean, v.effect) == (5, 5, 0.8, 0.0, 0.8)
    assert v.p < 0.05 and v.metric.endswith("4/5 vs 0/5")
    assert v.ci_lo > 0 and v.ci_hi <= 1


def test_event_stop_counts_only_stops_of_the_rule():
    warned_only = [("ok-s0", "entropy_collapse", 30, "warn")]
    [alerted] = judge([claim("collapse_rate")], {0: 40}, extra_alerts=warned_only)
    [stopped] = judge([claim("collapse_rate", event="stop")], {0: 40}, extra_alerts=warned_only)
    assert (alerted.arm_mean, alerted.versus_mean) == (0.2, 0.2)  # a warn is an alert
    assert (stopped.arm_mean, stopped.versus_mean) == (0.2, 0.0)  # ... but not a stop


def test_time_to_collapse_uses_stopped_runs_as_events_and_finished_runs_as_censored():
    [v] = judge([claim("time_to_collapse")], {0: 40, 1: 55, 2: 70, 3: 90})
    assert v.judged and v.test == "log-rank (exact permutation)"
    # restricted mean up to 100: (40 + 55 + 70 + 90 + 100)/5 = 71 vs 100
    assert (v.arm_mean, v.versus_mean, v.effect) == (pytest.approx(71.0), 100.0, pytest.approx(-29.0))
    # 4 events, all in 'bad': relabellings as extreme put all four there, with 1 of the 6 others: 6/C(10,5)
    # one-sided, doubled (claim p: each side at α/2, one tail of the 95% interval)
    assert v.p == pytest.approx(2 * 6 / 252) and v.distance > 0 and v.log_hazard_ratio > 0


def test_time_to_collapse_with_no_collapse_says_so_instead_of_a_zero_difference():
    """No run of either arm collapsed: there is no time to compare (it once printed +0 [+0, +0],
    inconclusive); the claim says so as the alert order does, and stays out of Holm's family."""
    [v] = judge([claim("time_to_collapse", rule="reward_collapse")], {})  # the rule reads the logged reward
    assert v.status == "cannot judge" and v.reason == "no run of bad or ok collapsed (reward_collapse)"
    assert math.isnan(v.effect) and math.isnan(v.p) and v.metric.endswith("(0/5 vs 0/5 collapsed)")


def test_a_claim_on_a_rule_that_is_off_is_not_judged():
    """Arm 'ok' turned entropy_collapse off — its 0 of 5 is no evidence of "never collapses";
    every outcome kind on that rule says so instead of "0/5 vs 0/5, inconclusive"."""
    claims = [claim("collapse_rate"), claim("time_to_collapse"), claim("alert_order")]
    runs, metrics, alerts, stops = sweep({0: 40, 1: 55})
    judged = judge_claims(claims, runs, metrics, alerts=alerts, stops=stops, rules_off={"ok": {"entropy_collapse"}})
    rate, time, order = judged
    assert rate.status == time.status == "cannot judge" and math.isnan(rate.p)
    assert rate.reason == ("rule entropy_collapse is off in arm 'ok' (monitor.entropy_collapse.action: "
                           "off): it never alerts there")
    assert "is off" not in order.reason  # the order reads arm 'bad' only
    from cancelctl.report.claims import verdict_text

    assert verdict_text(time).startswith("cannot judge: rule entropy_collapse is off in arm 'ok'")
    [off_first] = judge_claims([claim("alert_order")], runs, metrics, alerts=alerts, stops=stops,
                               rules_off={"bad": {"mismatch_growth"}})
    assert off_first.reason.startswith("rule mismatch_growth is off in arm 'bad'")


def test_a_run_stopped_by_another_rule_is_censored_not_counted():
    runs, metrics, alerts, stops = sweep({0: 40, 1: 55})
    stops["bad-s4"] = Stop("reward_collapse", 30)
    alerts.loc[len(alerts)] = ("bad-s4", "reward_collapse", 30, "stop")
    outcomes = {o.run_id: o for o in run_outcomes(runs[runs["arm"] == "bad"], ["entropy_collapse"], "alert", alerts,
                                                  stops, {r: BUDGET for r in runs["run_id"]})}
    assert outcomes["bad-s4"].collapsed is False and outcomes["bad-s4"].step == 30
    assert outcomes["bad-s4"].cut_by == "reward_collapse" and outcomes["bad-s0"].collapsed
    [rate] = judge_claims([claim("collapse_rate")], runs, metrics, alerts=alerts, stops=stops)
    assert (rate.n_seeds, rate.arm_mean) == (4, 0.5)  # left out of the rate, and said
    assert "1 run(s) of 'bad' stopped by another rule" in rate.notes and "reward_collapse at step 30" in rate.notes
    # a list of rules makes it a collapse
    [both] = judge_claims([claim("collapse_rate", rule=["entropy_collapse", "reward_collapse"])], runs, metrics,
                          alerts=alerts, stops=stops)
    assert (both.n_seeds, both.arm_mean) == (5, 0.6)


def test_alert_order_needs_enough_collapsing_runs():
    [few] = judge([claim("alert_order")], {0: 40, 1: 55, 2: 70, 3: 90})
    assert few.status == "cannot judge" and "4 collapsing run(s)" in few.reason and math.isnan(few.p)
    assert few.effect == 1.0 and few.metric.endswith("4 of 4 collapsing run(s)")
    [five] = judge([claim("alert_order")], {s: 40 + 10 * s for s in range(5)}, seeds=range(5))
    assert five.status == "cannot judge" and "needs ≥ 6" in five.reason  # 5 of 5: claim p 2/2⁵ > 0.05
    [enough] = judge([claim("alert_order")], {s: 40 + 10 * s for s in range(6)}, seeds=range(6))
    assert enough.judged and enough.p == pytest.approx(2 / 64) and enough.arm == "bad"  # 6 of 6: 2 · 1/2⁶
    assert enough.status == "supported" and enough.ci_lo > 0.5  # Clopper–Pearson: the sign test's own interval


def test_alert_order_counts_a_missing_or_late_first_alert_against_and_leaves_ties_out():
    late = [("bad-s5", "entropy_collapse", 50, "warn"), ("bad-s5", "mismatch_growth", 60, "warn"),
            ("bad-s6", "entropy_collapse", 50, "warn"),  # no mismatch alert at all
            ("bad-s7", "entropy_collapse", 50, "warn"), ("bad-s7", "mismatch_growth", 50, "warn")]  # a tie
    [v] = judge([claim("alert_order")], {s: 40 + s for s in range(5)}, seeds=range(8), extra_alerts=late)
    assert (v.n_seeds, v.effect) == (7, pytest.approx(5 / 7)) and "1 with mismatch_growth at the collapse" in v.notes


def test_too_few_runs_is_not_judged_and_missing_arm_says_so():
    [v] = judge([claim("collapse_rate")], {0: 40, 1: 50}, seeds=range(3))
    assert v.status == "cannot judge" and "a verdict needs ≥ 4 an arm" in v.reason and math.isnan(v.p)
    assert v.effect == pytest.approx(2 / 3)
    odd = ClaimSpec.model_validate({**claim("collapse_rate").model_dump(), "versus": "nobody"})
    runs, metrics, alerts, stops = sweep({})
    [missing] = judge_claims([odd], runs, metrics, alerts=alerts, stops=stops)
    assert "arm 'nobody' has no runs" in missing.reason


def test_a_rule_that_could_not_fire_is_not_read_as_never_collapsing():
    runs, metrics, alerts, stops = sweep({})  # no alert anywhere, and nobody logged actor/entropy
    [blind] = judge_claims([claim("collapse_rate")], runs, metrics, alerts=alerts, stops=stops)
    assert blind.status == "cannot judge" and "no run logged actor/entropy" in blind.reason
    entropy = metrics.assign(key="actor/entropy")
    [seen] = judge_claims([claim("collapse_rate")], runs, pd.concat([metrics, entropy]), alerts=alerts, stops=stops)
    assert seen.status == "inconclusive" and (seen.arm_mean, seen.versus_mean, seen.p) == (0.0, 0.0, 1.0)
    assert seen.seeds_needed is None  # equal rates: nothing to power


def test_a_run_with_no_steps_has_no_time_and_is_not_judged():
    runs, metrics, alerts, stops = sweep({0: 40, 1: 50, 2: 60, 3: 70})
    [v] = judge_claims([claim("time_to_collapse")], runs, metrics[metrics["run_id"] != "ok-s0"], alerts=alerts,
                       stops=stops)
    assert v.status == "cannot judge" and v.reason == "a run logged no steps: its time is unknown"
