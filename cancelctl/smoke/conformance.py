"""The smoke's rollout–trainer conformance gate (docs/validate-smoke.md#conformance).

On each configuration's second step — its rollouts generated after the first weight sync that carries
a trained update — the figures of cancelctl.backends.verl.conformance (|Δ log π| mean / p99 / max and
the spread of ρ = π_train / π_infer, [H eq. 5]) are read from verl's own metrics of that step and held
against the band a healthy configuration of the same precision shows:

- rollout and trainer both fp32: a healthy rollout is the trainer to float rounding (different kernels,
  a KV cache against one full forward), so anything above FP32_BAND — stale weights, another prompt
  rendering, a rollout computing in another dtype — is refused;
- a bf16 trainer (the default `model.dtype`) with an fp32 rollout: the trainer's bf16 rounding is the
  floor, BF16_BAND;
- an arm that asks for a mismatch — a rollout precision below fp32 (bf16 / fp16 `rollout.precision`),
  or a δ / σ injection — has its figures reported, not refused: the mismatch is the experiment. The
  row says when they are above the healthy band of its precision.

The smoke always runs its tiny model (tiny_model.py: two layers of width 64), so the bands are that
model's: its measured healthy figures times a margin; the measurements and why each margin is what it
is are in docs/validate-smoke.md#conformance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cancelctl.backends.verl.conformance import DIFF_MAX, DIFF_MEAN, DIFF_P99, RATIO_MAX, RATIO_STD, TOKENS
from cancelctl.spec.run import RunSpec

STEP = 2


@dataclass(frozen=True)
class Band:
    """Upper bounds of a healthy configuration's figures; `name` says which precision they are for."""

    name: str
    mean: float
    p99: float
    max: float
    ratio_std: float

    def exceeded(self, figures: dict[str, float]) -> list[str]:
        """The figures above their bound, as `name value > bound`."""
        bounds = {DIFF_MEAN: self.mean, DIFF_P99: self.p99, DIFF_MAX: self.max, RATIO_STD: self.ratio_std}
        return [f"{_short(key)} {figures[key]:.2g} > {bound:.2g}" for key, bound in bounds.items()
                if not figures[key] <= bound]  # a NaN figure is over every bound


# Healthy figures of the smoke's tiny model (docs/validate-smoke.md#conformance) × a margin. fp32: measured
# mean 1.8e-7, p99 4.8e-7, max 9.5e-7, ρ std 3.0e-7; the bound is ~50-100x that (float32 rounding of an
# incremental KV-cached forward against one full forward, which grows with the vocabulary) and still ~60x
# below the mean of the smallest fault measured, a bf16 rollout behind an fp32 trainer (6.3e-4).
FP32_BAND = Band("fp32", mean=1e-5, p99=5e-5, max=1e-4, ratio_std=5e-5)
# bf16: a bf16 rollout against an fp32 trainer measured mean 6.3e-4-7.4e-4, p99 2.1e-3-2.9e-3, max 2.3e-3-2.9e-3,
# ρ std 7.9e-4-9.5e-4; 7-17x that, its mean and p99 below a rollout shown another chat template's (1.1e-2, 3e-2).
BF16_BAND = Band("bf16", mean=5e-3, p99=2e-2, max=5e-2, ratio_std=1e-2)


@dataclass(frozen=True)
class Verdict:
    refused: bool
    text: str  # one line: the figures, and what was held against them


def asked_mismatch(run: RunSpec) -> str:
    """Why the arm expects its rollout and trainer to disagree ("" when it does not)."""
    spec = run.spec
    reasons = []
    if spec.rollout.precision != "fp32":
        reasons.append(f"rollout.precision {spec.rollout.precision}")
    if spec.algorithm.inject_delta is not None:
        reasons.append("algorithm.inject_delta")
    if spec.algorithm.inject_noise is not None:
        reasons.append("algorithm.inject_noise")
    return ", ".join(reasons)


def band(run: RunSpec) -> Band:
    """The band of a healthy configuration of this precision (module docstring)."""
    spec = run.spec
    return FP32_BAND if spec.model.dtype == "fp32" and spec.rollout.precision == "fp32" else BF16_BAND


def _step_metrics(verl_metrics: Path, step: int) -> dict[str, float]:
    """verl's numeric metrics of `step` (its file logger's JSONL: {"step": n, "data": {...}} per line)."""
    found: dict[str, float] = {}
    for line in verl_metrics.read_text(encoding="utf-8").splitlines() if verl_metrics.exists() else []:
        try:
            record = json.loads(line)
            if int(record["step"]) == step:
                found.update({k: float(v) for k, v in record["data"].items() if isinstance(v, (int, float))})
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def step_figures(verl_metrics: Path, step: int = STEP) -> dict[str, float] | None:
    """The conformance figures verl logged for `step`, or None."""
    found = {k: v for k, v in _step_metrics(verl_metrics, step).items() if k.startswith("conformance/")}
    return found if found.get(TOKENS) else None


def empty_update(verl_metrics: Path, step: int = STEP - 1) -> bool:
    """Whether the update of `step` changed nothing (verl's `actor/grad_norm` 0: every group's rewards
    equal, so every advantage is 0 — the rule of most data on a random tiny model). Then the weights the
    next sync carries are the ones the rollout already has, and a stale sync cannot show in log-probs."""
    return _step_metrics(verl_metrics, step).get("actor/grad_norm") == 0.0


EMPTY_UPDATE_NOTE = ("weight sync not tested: the step-1 update was empty (actor/grad_norm 0: every group's "
                     "rewards equal on the tiny model), so a stale sync cannot show in log-probs")


def verdict(run: RunSpec, figures: dict[str, float]) -> Verdict:
    """Refuse above the configuration's band, or report for an arm that asks for a mismatch (module
    docstring); the text names the figures either way."""
    shown = (f"|Δ log π| mean {figures[DIFF_MEAN]:.2g} p99 {figures[DIFF_P99]:.2g} max {figures[DIFF_MAX]:.2g}, "
             f"ρ std {figures[RATIO_STD]:.2g} max {figures[RATIO_MAX]:.3g} over {figures[TOKENS]:.0f} tokens")
    asked = asked_mismatch(run)
    expected = band(run)
    if asked:
        over = expected.exceeded(figures)
        where = f"above the healthy {expected.name} band ({'; '.join(over)})" if over else f"within the {expected.name} band"
        return Verdict(False, f"conformance reported ({asked}): {shown}, {where}")
    over = expected.exceeded(figures)
    if over:
        return Verdict(True, f"rollout–trainer conformance at step {STEP}: {shown}; above the healthy "
                             f"{expected.name} band ({'; '.join(over)}): stale weights after the sync, another "
                             f"tokenizer or chat template, or another dtype in the rollout")
    return Verdict(False, f"conformance ok ({expected.name}): {shown}")


def _short(key: str) -> str:
    return {DIFF_MEAN: "mean", DIFF_P99: "p99", DIFF_MAX: "max", RATIO_STD: "ρ std"}[key]
