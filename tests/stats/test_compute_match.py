"""The tidy frames on a compute axis, and the compute-matched check on logged compute."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cancelctl.stats.compute_match import ComputeViolation, check_compute_matched, compute_totals
from cancelctl.stats.frames import on_compute_axis


def _tidy(rows: list[tuple[str, int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["run_id", "step", "key", "value"])


def test_on_compute_axis_uses_the_same_or_next_logged_compute():
    reward = _tidy([("a", 1, "r", 0.1), ("a", 2, "r", 0.2), ("a", 3, "r", 0.3)])[["run_id", "step", "value"]]
    compute = _tidy([("a", 1, "c", 10.0), ("a", 3, "c", 30.0)])[["run_id", "step", "value"]]
    out = on_compute_axis(reward, compute)
    assert out["compute"].tolist() == [10.0, 30.0, 30.0]


def _runs(spec: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run_id": f"{arm}-{group}-{seed}", "name": "", "arm": arm, "group": group, "seed": seed, "G": g,
             "state": "FINISHED"}
            for arm, group, seed, g in spec
        ]
    )


def _compute_metrics(run_tokens: dict[str, tuple[float, int]]) -> pd.DataFrame:
    rows = []
    for run_id, (tokens, updates) in run_tokens.items():
        for step in range(1, 5):
            rows.append((run_id, step, "compute/gen_tokens_cum", tokens * step / 4))
            rows.append((run_id, step, "compute/update_steps_cum", float(updates * step // 4)))
    return _tidy(rows)


def test_check_compute_matched_flags_the_mismatched_arm_with_numbers():
    runs = _runs([(arm, "rollout.G=4", seed, 4) for arm in ("gspo", "dfpo", "grpo") for seed in (0, 1)])
    tokens = {"gspo": 1_000_000, "dfpo": 1_020_000, "grpo": 1_500_000}
    metrics = _compute_metrics({rid: (tokens[rid.split("-")[0]], 40) for rid in runs["run_id"]})
    violations = check_compute_matched(runs, metrics, tol=0.05)
    assert len(violations) == 1
    v = violations[0]
    assert isinstance(v, ComputeViolation)
    assert (v.group, v.field) == ("rollout.G=4", "gen_tokens_total")
    assert v.values == {"dfpo": "1,020,000", "grpo": "1,500,000", "gspo": "1,000,000"}
    assert "33.3%" in str(v) and "grpo=1,500,000" in str(v)


def test_check_compute_matched_update_steps_and_G_must_be_equal():
    runs = _runs([("gspo", "", 0, 8), ("gspo", "", 1, 8), ("dfpo", "", 0, 8), ("dfpo", "", 1, 4)])
    metrics = _compute_metrics({"gspo--0": (1e6, 40), "gspo--1": (1e6, 40), "dfpo--0": (1e6, 40), "dfpo--1": (1e6, 32)})
    by_field = {v.field: v for v in check_compute_matched(runs, metrics)}
    assert set(by_field) == {"update_steps", "G"}
    assert by_field["update_steps"].values == {"dfpo": "32–40", "gspo": "40"}
    assert by_field["G"].values == {"dfpo": "4–8", "gspo": "8"}
    assert str(by_field["G"]).startswith("sweep: G differ across runs")


def test_check_compute_matched_passes_matched_arms_and_compares_within_groups_only():
    runs = _runs([(arm, f"G={g}", 0, g) for arm in ("a", "b") for g in (4, 8)])
    metrics = _compute_metrics({f"{arm}-G={g}-0": (1e5 * g, 10) for arm in ("a", "b") for g in (4, 8)})
    assert check_compute_matched(runs, metrics) == []


def test_compute_totals_falls_back_to_summing_per_step_tokens():
    runs = _runs([("a", "", 0, 4)])
    metrics = _tidy([("a--0", s, "compute/gen_tokens", 100.0) for s in range(1, 4)])
    totals = compute_totals(runs, metrics)
    assert totals.loc[0, "gen_tokens_total"] == 300.0
    assert np.isnan(totals.loc[0, "update_steps"])


def _on_axis(runs: pd.DataFrame, axis: str | dict[str, str]) -> pd.DataFrame:
    return runs.assign(budget_axis=runs["arm"].map(axis) if isinstance(axis, dict) else axis)


def test_a_token_budget_matches_on_tokens_and_G_not_on_update_steps():
    """reward_balanced discards rollouts: at equal tokens it does fewer updates, which is the point."""
    runs = _on_axis(_runs([(arm, "", seed, 4) for arm in ("default", "balanced") for seed in (0, 1)]), "gen_tokens")
    metrics = _compute_metrics({"default--0": (100_400, 800), "default--1": (100_900, 800),
                                "balanced--0": (101_500, 560), "balanced--1": (100_100, 600)})
    assert check_compute_matched(runs, metrics) == []
    metrics = _compute_metrics({"default--0": (100_000, 800), "default--1": (100_000, 800),
                                "balanced--0": (140_000, 560), "balanced--1": (140_000, 600)})
    [violation] = check_compute_matched(runs, metrics)
    assert violation.field == "gen_tokens_total"


def test_an_update_step_budget_matches_on_update_steps_and_G_not_on_tokens():
    runs = _on_axis(_runs([(arm, "", 0, 4) for arm in ("a", "b")]), "update_steps")
    assert check_compute_matched(runs, _compute_metrics({"a--0": (1e5, 40), "b--0": (2e5, 40)})) == []
    [violation] = check_compute_matched(runs, _compute_metrics({"a--0": (1e5, 40), "b--0": (1e5, 44)}))
    assert violation.field == "update_steps"


def test_arms_on_different_budget_axes_are_not_matched_and_every_rule_applies():
    runs = _on_axis(_runs([(arm, "", 0, 4) for arm in ("a", "b")]), {"a": "steps", "b": "gen_tokens"})
    by_field = {v.field: v for v in check_compute_matched(runs, _compute_metrics({"a--0": (1e5, 40), "b--0": (1e5, 30)}))}
    assert set(by_field) == {"budget_axis", "update_steps"}
    assert by_field["budget_axis"].values == {"a": "steps", "b": "gen_tokens"}


def test_an_unknown_axis_is_a_step_budget():
    runs = _on_axis(_runs([(arm, "", 0, 4) for arm in ("a", "b")]), {"a": None, "b": "steps"})
    [violation] = check_compute_matched(runs, _compute_metrics({"a--0": (1e5, 40), "b--0": (1e5, 30)}))
    assert violation.field == "update_steps"
