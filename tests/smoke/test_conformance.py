"""The smoke's conformance gate (cancelctl.smoke.conformance) on figures given to it (no verl run: the
real runs, with planted faults, are test_smoke_conformance.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cancelctl.backends.verl.conformance import DIFF_MAX, DIFF_MEAN, DIFF_P99, RATIO_MAX, RATIO_STD, TOKENS
from cancelctl.smoke.conformance import BF16_BAND, FP32_BAND, asked_mismatch, band, empty_update, step_figures, verdict
from cancelctl.spec.expand import load_sweep

BASE = {
    "backend": "verl", "executor": "local",
    "model": {"path": "model", "dtype": "fp32"},
    "data": {"train_files": ["train.parquet"], "max_response_length": 16},
    "algorithm": {"mini_batch_size": 4},
    "rollout": {"G": 4, "precision": "fp32"},
    "budget": {"steps": 2, "prompts_per_step": 8},
    "cluster": {"device": "cpu"},
}
ARMS = {
    "fp32": {},
    "bf16-trainer": {"model": {"dtype": "bf16"}},
    "bf16-rollout": {"rollout": {"precision": "bf16"}},
    "delta": {"algorithm": {"inject_delta": {"delta": 2.0}}},
    "noise": {"algorithm": {"inject_noise": {"sigma": 0.1}}},
}


def runs(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "base": BASE, "arms": ARMS, "seeds": [0]}))
    return {run.arm: run for run in load_sweep(path, allow_unmatched=True).runs}


def figures(mean, p99=None, top=None, std=None):
    p99 = mean if p99 is None else p99
    return {DIFF_MEAN: mean, DIFF_P99: p99, DIFF_MAX: p99 if top is None else top, RATIO_STD: mean if std is None else std,
            RATIO_MAX: 1.0 + (p99 if top is None else top), TOKENS: 256.0}


def test_the_band_is_fp32_only_when_trainer_and_rollout_are_both_fp32(tmp_path):
    arms = runs(tmp_path)
    assert band(arms["fp32"]) is FP32_BAND and band(arms["delta"]) is FP32_BAND
    assert band(arms["bf16-trainer"]) is BF16_BAND and band(arms["bf16-rollout"]) is BF16_BAND
    assert FP32_BAND.mean < BF16_BAND.mean and FP32_BAND.max < BF16_BAND.max


def test_an_arm_asks_for_a_mismatch_by_a_lower_rollout_precision_or_an_injection(tmp_path):
    arms = runs(tmp_path)
    assert asked_mismatch(arms["fp32"]) == "" and asked_mismatch(arms["bf16-trainer"]) == ""
    assert asked_mismatch(arms["bf16-rollout"]) == "rollout.precision bf16"
    assert asked_mismatch(arms["delta"]) == "algorithm.inject_delta"
    assert asked_mismatch(arms["noise"]) == "algorithm.inject_noise"


def test_within_the_band_passes_and_names_the_figures(tmp_path):
    found = verdict(runs(tmp_path)["fp32"], figures(FP32_BAND.mean / 10))
    assert not found.refused and found.text.startswith("conformance ok (fp32)") and "over 256 tokens" in found.text


def test_above_the_fp32_band_is_refused_naming_each_figure_over_its_bound(tmp_path):
    arms = runs(tmp_path)
    found = verdict(arms["fp32"], figures(FP32_BAND.mean / 10, top=FP32_BAND.max * 3))
    assert found.refused and "above the healthy fp32 band" in found.text
    assert f"max {FP32_BAND.max * 3:.2g} > {FP32_BAND.max:.2g}" in found.text and "mean" not in found.text.split("band (")[1]
    # the same figures from a bf16 trainer are within its band: its rounding is the floor
    assert not verdict(arms["bf16-trainer"], figures(FP32_BAND.mean / 10, top=FP32_BAND.max * 3)).refused
    nan = figures(float("nan"))
    assert verdict(arms["fp32"], nan).refused  # a NaN gap is never conformance


def test_an_arm_that_asks_for_a_mismatch_is_reported_and_told_when_above_its_band(tmp_path):
    arms = runs(tmp_path)
    for arm in ("bf16-rollout", "delta", "noise"):
        found = verdict(arms[arm], figures(BF16_BAND.mean * 2, p99=BF16_BAND.p99 / 2, top=BF16_BAND.max / 2))
        assert not found.refused and found.text.startswith(f"conformance reported ({asked_mismatch(arms[arm])})")
        assert "above the healthy" in found.text and f"mean {BF16_BAND.mean * 2:.2g} > " in found.text  # said, not refused
    within = verdict(arms["bf16-rollout"], figures(BF16_BAND.mean / 2))
    assert not within.refused and "within the bf16 band" in within.text


def test_step_figures_are_read_from_verls_metrics_of_that_step(tmp_path):
    path = tmp_path / "verl_metrics.jsonl"
    lines = [{"step": 1, "data": {DIFF_MEAN: 9.0, TOKENS: 10}}, "not json",
             {"step": 2, "data": {DIFF_MEAN: 1e-6, TOKENS: 64, "actor/pg_loss": 0.1}}]
    path.write_text("\n".join(json.dumps(x) if isinstance(x, dict) else x for x in lines))
    assert step_figures(path) == {DIFF_MEAN: 1e-6, TOKENS: 64.0}
    assert step_figures(path, 3) is None and step_figures(tmp_path / "missing.jsonl") is None


def test_an_empty_step_1_update_is_told_apart(tmp_path):
    path = tmp_path / "verl_metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "data": {"actor/grad_norm": 0.0}}) + "\n")
    assert empty_update(path)
    path.write_text(json.dumps({"step": 1, "data": {"actor/grad_norm": 0.3}}) + "\n")
    assert not empty_update(path) and not empty_update(tmp_path / "missing.jsonl")
