"""verl's built-in policy losses against the papers their names cite: where an arm runs one of them
(`algorithm.verl_loss_mode`) with settings that make it another objective than the paper's, `validate`
warns and says the setting to write (docs/verl.md, "verl's built-in losses").

Read in verl 0.9.1's verl/trainer/ppo/core_algos.py: `gspo` aggregates with the actor's
`loss_agg_mode`, whose default is token-mean (its own comment: "differ from GSPO original paper that
aggregate the loss at the sequence level"), and clips with the actor's clip_ratio (0.2 by default).
`sapo` forces seq-mean-token-mean itself, whatever the setting, so it has no row here; `vanilla` is
PPO's token-level clip, which no sequence-level paper defines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cancelctl.backends.verl.overrides import ACTOR


@dataclass(frozen=True)
class PaperLoss:
    """What the paper a built-in loss's name cites prescribes."""

    paper: str
    agg_mode: str  # verl's loss_agg_mode that computes the paper's objective
    agg_why: str
    clip: tuple[float, float] | None = None  # (ε_low, ε_high) the paper clips at, where its objective depends on the scale
    clip_why: str = ""


PAPER_LOSSES = {
    "gspo": PaperLoss(
        paper="GSPO (Zheng et al. 2025, arXiv 2507.18071)",
        agg_mode="seq-mean-token-mean",
        # J_GSPO = E[1/G Σ_i min(s_i Â_i, clip(s_i) Â_i)], §4.1: each response counts once, whatever its length
        agg_why="its objective is a mean over the G responses of each response's term (§4.1), so a long "
        "response weighs as much as a short one",
        # s_i = (π/π_old)^(1/|y_i|) stays within ~1e-3 of 1: a token-level clip of 0.2 never binds
        clip=(3e-4, 4e-4),
        clip_why="its length-normalised sequence ratio stays within ~1e-3 of 1, so it clips at 3e-4 / 4e-4 "
        "(§5.1); a token-level clip such as 0.2 leaves it unclipped",
    ),
}
CLIP_TOLERANCE = 10.0  # a clip more than this many times the paper's is of another kind, not a tuning


def builtin_loss_warnings(runs: Iterable) -> list[str]:
    """One warning per (built-in loss, setting, value) that departs from the paper its name cites,
    naming the arms and the setting to write (the spec field and the verl override it renders)."""
    arms: dict[str, list[str]] = {}
    for run in runs:
        alg = run.spec.algorithm
        paper = PAPER_LOSSES.get(alg.verl_loss_mode or "") if run.spec.backend == "verl" else None
        if paper is None:
            continue
        for warning in _departures(alg, paper):
            of = arms.setdefault(warning, [])
            if run.arm not in of:
                of.append(run.arm)
    return [f"{warning} [arm {', '.join(of)}]" for warning, of in arms.items()]


def _departures(alg, paper: PaperLoss) -> list[str]:
    name = alg.verl_loss_mode
    out = []
    if alg.agg_mode != paper.agg_mode:
        out.append(
            f"verl's built-in {name} with loss_agg_mode {alg.agg_mode} is not {paper.paper}: {paper.agg_why}; "
            f"write algorithm.loss_agg_mode: {paper.agg_mode} ({ACTOR}.loss_agg_mode={paper.agg_mode})"
        )
    if paper.clip is not None and max(alg.clip_low / paper.clip[0], alg.clip_high / paper.clip[1]) > CLIP_TOLERANCE:
        low, high = paper.clip
        out.append(
            f"verl's built-in {name} with clip {alg.clip_low:g}/{alg.clip_high:g} is not {paper.paper}: "
            f"{paper.clip_why}; write algorithm: {{clip_low: {low:g}, clip_high: {high:g}}} "
            f"({ACTOR}.clip_ratio_low={low:g} {ACTOR}.clip_ratio_high={high:g})"
        )
    return out
