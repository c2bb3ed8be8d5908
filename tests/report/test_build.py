"""build_report on a synthetic sweep (3 arms × 2 G × 3 seeds) with planted effects."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from cancelctl.errors import SpecError
from cancelctl.report import NOT_MATCHED, UnmatchedArmsError, build_report, fmt_number, fmt_p

ARMS = {"gspo": 30.0, "dfpo": 20.0, "grpo": 40.0}  # arm -> time constant of the reward curve (steps)
FINAL_ACC = {"gspo": 0.60, "dfpo": 0.66, "grpo": 0.58}  # planted eval accuracies
GS = (4, 8)
SEEDS = (0, 1, 2)
STEPS = 100


def synthetic_sweep(token_scale: dict[tuple[str, int], float] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs + tidy metrics as `collect` returns them; token_scale[(arm, G)] skews generated tokens."""
    rng = np.random.default_rng(0)
    runs, rows = [], []
    steps = np.arange(1, STEPS + 1)
    for g in GS:
        for arm, tau in ARMS.items():
            for seed in SEEDS:
                run_id = f"{arm}-G{g}-s{seed}"
                runs.append({
                    "run_id": run_id, "name": run_id, "arm": arm, "group": f"rollout.G={g}", "seed": seed,
                    "G": g, "state": "FINISHED", "axis.rollout.G": g,
                })
                seed_rng = np.random.default_rng(seed)  # shared by the arms of a seed: pairing helps
                seed_effect = seed_rng.normal(0, 0.02)
                reward = 0.1 + 0.7 * (1 - np.exp(-steps / tau)) + rng.normal(0, 0.01, STEPS)
                tokens_per_step = 16 * g * 100 * (token_scale or {}).get((arm, g), 1.0)
                series = {
                    "critic/score/mean": reward,
                    "actor/entropy": 2.0 * np.exp(-steps / (tau * 2)) + rng.normal(0, 0.02, STEPS),
                    "compute/gen_tokens": np.full(STEPS, tokens_per_step),
                    "compute/gen_tokens_cum": steps * tokens_per_step,
                    "compute/update_steps_cum": 2.0 * steps,
                    "compute/hours_cum": steps * 0.01,
                    "dfpo/asym": np.full(STEPS, 0.02 if arm == "dfpo" else 0.1) + rng.normal(0, 0.005, STEPS),
                    "mismatch/rho_std": 0.01 + 0.001 * steps + rng.normal(0, 0.001, STEPS),
                    "hacking/J": rng.normal(0.5, 0.1, STEPS),
                    **{f"cancel/energy_b{b}": np.full(STEPS, 0.25) for b in range(3)},
                    "cancel/energy_b3": np.full(STEPS, 0.15 if arm == "dfpo" else 0.3),
                    "cancel/flip_pos": rng.uniform(0.1, 0.2, STEPS),
                    "cancel/flip_neg": rng.uniform(0.1, 0.2, STEPS),
                }
                for key, values in series.items():
                    rows += [(run_id, int(s), key, float(v)) for s, v in zip(steps, values)]
                for s in range(10, STEPS + 1, 10):
                    acc = FINAL_ACC[arm] * s / STEPS + seed_effect + rng.normal(0, 0.003)
                    rows.append((run_id, s, "val-core/aime25/acc/mean_at_4", acc))
    return pd.DataFrame(runs), pd.DataFrame(rows, columns=["run_id", "step", "key", "value"])


def report_for(tmp_path: Path, runs=None, metrics=None, **kwargs):
    if runs is None:
        runs, metrics = synthetic_sweep()
    options = dict(sweep="synthetic", baseline="gspo", out_dir=tmp_path / "synthetic", n_boot=2_000)
    options.update(kwargs)
    return build_report(runs, metrics, **options)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    console = Console(record=True, width=200)
    built = report_for(tmp_path_factory.mktemp("report"), console=console)
    built.console_text = console.export_text()
    return built


def test_writes_every_file(report):
    out = report.out_dir
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    for table in report.tables:
        assert (out / "tables" / f"{table.name}.csv").is_file()
        payload = json.loads((out / "tables" / f"{table.name}.json").read_text())
        assert payload["title"] == table.title and len(payload["rows"]) == len(table.data)
    plots = {p.name for p in (out / "plots").iterdir()}
    assert plots == {"reward_vs_compute.png", "compute_at_reward.png", "mechanisms_vs_step.png"}
    assert all(path.exists() for path in report.files)
    markdown = (out / "report.md").read_text()
    assert "## Final scores" in markdown and "— per run" not in markdown  # per-run detail: CSV/JSON only


def test_compute_at_reward_is_normalised_to_the_baseline(report):
    data = report.table("compute_at_reward").data.set_index(["group", "arm"])
    display = report.table("compute_at_reward").display
    assert (display.loc[display["arm"] == "gspo", "vs gspo"] == "1.00×").all()
    for group in ("rollout.G=4", "rollout.G=8"):
        assert data.loc[(group, "gspo"), "normalised"] == pytest.approx(1.0)
        # dfpo learns fastest (tau 20 vs 30): it needs less compute; grpo (tau 40) more
        assert data.loc[(group, "dfpo"), "normalised"] < 1.0 < data.loc[(group, "grpo"), "normalised"]
    per_run = report.table("compute_at_reward_runs").data
    assert len(per_run) == 18 and per_run["reached"].all()
    assert (per_run["compute_at_reward"] % (16 * 100 * 4) == 0).all()  # a logged compute, not interpolated


def test_default_kappa_is_stated(report):
    assert report.kappa is not None and 0.1 < report.kappa < 0.8
    assert "default" in report.kappa_note and f"{report.kappa:.4g}" in report.kappa_note
    assert report.kappa_note in (report.out_dir / "report.md").read_text()


def test_final_scores_find_the_planted_improvement(report):
    data = report.table("final_scores").data.set_index(["group", "arm"])
    for group in ("rollout.G=4", "rollout.G=8"):
        dfpo = data.loc[(group, "dfpo")]
        assert dfpo["delta_vs_baseline"] == pytest.approx(0.06, abs=0.01)
        assert dfpo["p_value"] < 0.05 and dfpo["n_paired"] == 3
        assert dfpo["ci_lo"] < dfpo["mean"] < dfpo["ci_hi"]
        assert np.isnan(data.loc[(group, "gspo"), "delta_vs_baseline"])


def test_delta_per_g_has_one_column_per_G(report):
    display = report.table("delta_per_G").display
    assert list(display.columns) == ["benchmark", "arm", "G=4", "G=8"]
    assert set(display["arm"]) == {"dfpo", "grpo"}
    assert display.loc[display["arm"] == "dfpo", "G=4"].item().startswith("+0.06")


def test_jitter2_and_mechanisms(report):
    jitter = report.table("jitter2").data
    assert set(jitter["metric"]) == {"critic/score/mean", "actor/entropy"}
    mech = report.table("mechanisms").data.set_index(["group", "arm", "key"])
    energy = mech.xs("cancel/energy_b3", level="key")["mean"]
    assert energy.loc[("rollout.G=4", "dfpo")] == pytest.approx(0.15)
    assert energy.loc[("rollout.G=4", "gspo")] == pytest.approx(0.3)
    growth = mech.xs("mismatch/rho_std", level="key")["mean"]
    assert growth.to_numpy() == pytest.approx(0.001, abs=2e-4)


def test_console_prints_the_tables(report):
    for title in ("Final scores", "Compute@Reward", "Jitter2", "Mechanism summary", "per group size G"):
        assert title in report.console_text
    assert "1.00×" in report.console_text


def test_html_is_self_contained(report):
    html = (report.out_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)
    assert "http://" not in html and "https://" not in html


def test_unmatched_arms_are_refused_with_names_and_numbers(tmp_path):
    runs, metrics = synthetic_sweep(token_scale={("grpo", 8): 1.5})
    with pytest.raises(UnmatchedArmsError) as caught:
        report_for(tmp_path, runs, metrics)
    message = str(caught.value)
    assert "rollout.G=8" in message and "gen_tokens_total" in message
    assert "grpo=1,920,000" in message and "gspo=1,280,000" in message
    assert "rollout.G=4" not in message
    assert isinstance(caught.value, SpecError) and caught.value.exit_code == 2
    assert not (tmp_path / "synthetic").exists()


def test_allow_unmatched_marks_every_table(tmp_path):
    runs, metrics = synthetic_sweep(token_scale={("grpo", 8): 1.5})
    report = report_for(tmp_path, runs, metrics, allow_unmatched=True, plots=False)
    assert not report.compute_matched
    for table in report.tables:
        if table.name != "compute_match":
            assert any(NOT_MATCHED in note and "rollout.G=8" in note for note in table.notes), table.name
        if "group" in table.data.columns:
            flags = table.data.groupby("group")["compute_matched"].all()
            assert not flags["rollout.G=8"] and flags["rollout.G=4"]
    assert "banner" in (report.out_dir / "report.html").read_text()
    assert NOT_MATCHED in (report.out_dir / "report.md").read_text()


def test_not_reached_is_text_not_a_number(tmp_path):
    report = report_for(tmp_path, threshold=0.78, plots=False)
    table = report.table("compute_at_reward")
    assert report.kappa_note == "κ = 0.78 (given)"
    grpo = table.display[table.display["arm"] == "grpo"]
    # grpo tops out at 0.1 + 0.7·(1−e^{−2.5}) ≈ 0.74 (noise sd 0.01): no seed reaches 0.78
    assert grpo["mean (generated tokens)"].str.fullmatch(r"not reached \(0/3 seeds reached κ\)").all()
    assert (grpo["vs gspo"] == "not reached").all()
    assert table.data.loc[table.data["arm"] == "grpo", "mean"].isna().all()


def test_missing_keys_say_not_logged(tmp_path):
    runs, metrics = synthetic_sweep()
    keep = ~metrics["key"].str.match(r"(dfpo|mismatch|hacking|cancel)/|val-core/")
    report = report_for(tmp_path, runs, metrics[keep], plots=False)
    assert report.table("mechanisms").notes[0].startswith("not logged: dfpo/asym")
    assert report.table("final_scores").notes == ["not logged: val-core/<benchmark>/acc/mean_at_<k>"]
    assert (report.out_dir / "tables" / "final_scores.csv").read_text() == ""
    assert "not logged: dfpo/asym" in (report.out_dir / "report.md").read_text()
    assert report.table("compute_at_reward").data.shape[0] == 6  # the reward-based tables still work


def test_unfinished_runs_are_left_out_and_said(tmp_path):
    runs, metrics = synthetic_sweep()
    runs.loc[runs["run_id"] == "dfpo-G4-s2", "state"] = "FAILED"
    report = report_for(tmp_path, runs, metrics, plots=False)
    assert any("FAILED: 1" in note and "dfpo-G4-s2" in note for note in report.notes)
    counts = report.table("final_scores").data.set_index(["group", "arm"])["n_seeds"]
    assert counts[("rollout.G=4", "dfpo")] == 2 and counts[("rollout.G=8", "dfpo")] == 3


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(SpecError, match="baseline arm 'ppo' has no runs.*dfpo, grpo, gspo"):
        report_for(tmp_path, baseline="ppo")
    with pytest.raises(SpecError, match="--compute must be one of"):
        report_for(tmp_path, compute="flops")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="headless check needs Debian's chromium")
def test_html_renders_in_headless_chromium(report, tmp_path):
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={screenshot}", "--window-size=1400,3000",
            (report.out_dir / "report.html").as_uri(),
        ],
        check=True, capture_output=True, timeout=120,
    )
    assert screenshot.stat().st_size > 50_000  # a blank page is a few kB


def test_number_formats():
    assert [fmt_number(v) for v in (0.82534, 12_345, 640_000, 1.28e6, 2.5e9, float("nan"), None)] == [
        "0.8253", "12.3k", "640k", "1.28M", "2.5G", "—", "—"
    ]
    assert [fmt_p(0.0004, 5), fmt_p(0.0312, 5), fmt_p(float("nan"), 2), fmt_p(float("nan"), 0)] == [
        "<0.001", "0.031", "n/a (2 shared seeds)", "no shared seeds"
    ]


def test_no_grid_single_seed_sweep(tmp_path):
    runs, metrics = synthetic_sweep()
    runs = runs[(runs["G"] == 4) & (runs["seed"] == 0)].drop(columns="axis.rollout.G").assign(group="")
    metrics = metrics[metrics["run_id"].isin(runs["run_id"])]
    report = report_for(tmp_path, runs, metrics, plots=False)
    final = report.table("final_scores").display
    assert "group" not in final.columns
    assert final["mean [95% CI]"].str.endswith("(1 seed)").all()
    assert (final.loc[final["arm"] != "gspo", "p (paired)"] == "n/a (1 shared seed)").all()
    assert report.table("delta_per_G").notes == ["G is not a sweep axis (rollout.G): no table"]
