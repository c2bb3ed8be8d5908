"""The compute-scaling table and its claims on fixed metric inputs (`scaling_sweep`: ScaleRL curves
with planted A and B per arm): per arm A, B, C_mid [95% CI] over seeds for the training reward and the
eval benchmark, the fit that cannot be made said, asymptote and efficiency claims judged."""

import math

import pytest
from report_frames import SCALING_ARMS, SCALING_MIDPOINT, report_for, scaling_sweep

from cancelctl.report.plots import _fitted_curves
from cancelctl.spec.claims import ClaimSpec


def claim(claim_id: str, kind: str, arm: str = "dfpo", **metric) -> ClaimSpec:
    return ClaimSpec.model_validate({
        "id": claim_id, "source": "ScaleRL §3", "statement": f"{arm}'s {kind} is higher",
        "metric": {"kind": kind, **metric}, "direction": "higher", "arm": arm, "versus": "gspo",
    })


CLAIMS = [
    claim("A-higher", "asymptote"),
    claim("B-higher", "efficiency"),
    claim("A-eval-updates", "asymptote", key="val-core/lab/acc/mean_at_4", compute="updates"),
    claim("A-stalled", "asymptote", arm="stalled"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    runs, metrics = scaling_sweep()
    return report_for(tmp_path_factory.mktemp("scaling"), runs, metrics, claims=CLAIMS, plots=False)


def test_the_table_shows_each_arms_fit_with_intervals_over_seeds(report):
    table = report.table("compute_scaling")
    data = table.data.set_index(["metric", "arm"])
    for metric in ("training reward", "lab avg@4"):
        for arm in ("gspo", "dfpo"):
            row = data.loc[(metric, arm)]
            a, b = SCALING_ARMS[arm]
            assert row["n_fitted"] == row["n_seeds"] == 4
            assert row["asymptote_ci_lo"] < a < row["asymptote_ci_hi"], (metric, arm)
            assert row["efficiency_ci_lo"] < b < row["efficiency_ci_hi"], (metric, arm)
            assert row["midpoint_ci_lo"] < SCALING_MIDPOINT < row["midpoint_ci_hi"], (metric, arm)
    stalled = data.loc[("training reward", "stalled")]
    assert stalled["n_fitted"] == 0 and math.isnan(stalled["asymptote_mean"])
    shown = table.display.set_index(["metric", "arm"])
    assert shown.loc[("training reward", "stalled"), "n"] == "0 of 4"
    assert shown.loc[("training reward", "stalled"), "A [95% CI]"] == "no fit"
    assert shown.loc[("training reward", "dfpo"), "A [95% CI]"].startswith("0.7")
    [failed] = [n for n in table.notes if n.startswith("no fit of training reward: ")]
    assert failed.count("(no rise") == 4 and failed.index("stalled s0") < failed.index("stalled s3")
    runs = report.table("compute_scaling_runs")
    assert not runs.shown and len(runs.data) == 2 * 3 * 4  # 2 metrics × 3 arms × 4 seeds, one fit (or reason) each
    markdown = (report.out_dir / "report.md").read_text()
    assert "## Compute scaling (ScaleRL fit" in markdown and "| training reward | dfpo | 4 |" in markdown
    # the plot's overlay: the mean parameters of each arm that has fits
    assert set(_fitted_curves(report)) == {("", "gspo"), ("", "dfpo")}


def test_asymptote_and_efficiency_claims_are_judged_paired_over_seeds(report):
    data = report.table("claims").data.set_index("claim_id")
    for claim_id in ("A-higher", "B-higher", "A-eval-updates"):
        row = data.loc[claim_id]
        assert row["status"] == "supported", (claim_id, row["verdict"])
        assert row["ci_lo"] > 0 and row["p_holm"] < 0.05 and row["n_seeds"] == 4  # the interval says the same
    assert data.loc["A-higher", "effect"] == pytest.approx(0.10, abs=0.03)
    assert data.loc["B-higher", "effect"] == pytest.approx(0.8, abs=0.4)
    assert data.loc["A-higher", "metric"] == "asymptote A (fit on tokens) of critic/score/mean"
    stalled = data.loc["A-stalled"]
    assert stalled["status"] == "cannot judge"
    assert stalled["reason"].startswith("arm 'stalled': no compute-scaling fit of critic/score/mean on tokens (seed 0: no rise")
    assert any(n.startswith("asymptote / efficiency: A / B of ScaleRL's curve") for n in report.table("claims").notes)
