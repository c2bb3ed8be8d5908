"""An arm running one of verl's built-in losses (`algorithm.verl_loss_mode`): rendered as verl's own
loss mode with verl's defaults, and `validate` warns where that is not the paper the name cites
(verl 0.9.1's gspo: per-token mean, clip 0.2), saying the setting to write."""

from __future__ import annotations

import pytest
from verl_helpers import as_dict

from cancelctl.backends.validate import validate_files
from cancelctl.backends.verl import render_overrides
from cancelctl.backends.verl.builtin_losses import PAPER_LOSSES, builtin_loss_warnings
from cancelctl.errors import SpecError

AGG = "actor_rollout_ref.actor.loss_agg_mode"

SWEEP = """
name: builtin
base:
  backend: verl
  executor: slurm
  model: {path: Qwen/Qwen3-4B-Base}
  data: {train_files: [data/train.parquet], val_files: [data/val.parquet], max_response_length: 1024}
  algorithm: {mini_batch_size: 16}
  rollout: {G: 4}
  budget: {steps: 10, prompts_per_step: 32}
  cluster: {nodes: 1, gpus_per_node: 8}
arms:
  verl-gspo: {algorithm: {verl_loss_mode: gspo}}
  verl-gspo-paper: {algorithm: {verl_loss_mode: gspo, loss_agg_mode: seq-mean-token-mean, clip_low: 3.0e-4, clip_high: 4.0e-4}}
  verl-vanilla: {algorithm: {verl_loss_mode: vanilla}}
  ours: {algorithm: {loss: gspo, loss_agg_mode: token-mean}}
"""


def test_builtin_loss_renders_as_verl_runs_it(make_run):
    o = as_dict(render_overrides(make_run("{algorithm: {verl_loss_mode: gspo}}")))
    assert o["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"  # not cancel_gspo
    assert o[AGG] == "token-mean"  # verl's default: what plain verl would run
    assert (o["actor_rollout_ref.actor.clip_ratio_low"], o["actor_rollout_ref.actor.clip_ratio_high"]) == ("0.2", "0.2")
    ours = as_dict(render_overrides(make_run("{algorithm: {loss: gspo}}")))
    assert ours["actor_rollout_ref.actor.policy_loss.loss_mode"] == "cancel_gspo" and ours[AGG] == "seq-mean-token-mean"


def test_validate_warns_where_verls_gspo_is_not_the_papers(write_yaml):
    path = write_yaml(SWEEP)
    [item] = validate_files([path], compose_verl=False, check_data=False, check_memory=False).files
    assert item.ok  # a warning, not a refusal: the comparison may be the point of the sweep
    warnings = item.note.split("; warning: ")[1:]
    agg = [w for w in warnings if "loss_agg_mode token-mean" in w]
    clip = [w for w in warnings if "clip 0.2/0.2" in w]
    assert len(agg) == 1 and len(clip) == 1 and len(warnings) == 2, warnings
    # names the paper, says the spec field and the verl override to write, and the arm — only the one arm
    assert "verl's built-in gspo" in agg[0] and "arXiv 2507.18071" in agg[0]
    assert "write algorithm.loss_agg_mode: seq-mean-token-mean" in agg[0]
    assert f"({AGG}=seq-mean-token-mean)" in agg[0]
    assert agg[0].endswith("[arm verl-gspo]") and clip[0].endswith("[arm verl-gspo]")
    assert "clip_low: 0.0003, clip_high: 0.0004" in clip[0] and "clip_ratio_low=0.0003" in clip[0]


def test_the_warning_is_printed_by_the_cli(write_yaml):
    from typer.testing import CliRunner

    from cancelctl.cli import app

    result = CliRunner().invoke(app, ["validate", "--skip-verl", "--skip-data", str(write_yaml(SWEEP))])
    assert result.exit_code == 0
    assert "verl's built-in gspo with loss_agg_mode token-mean" in " ".join(result.output.split())


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_every_aggregation_but_the_papers_is_flagged(make_run, agg):
    run = make_run(f"{{algorithm: {{verl_loss_mode: gspo, loss_agg_mode: {agg}, clip_low: 3.0e-4, clip_high: 4.0e-4}}}}")
    [warning] = builtin_loss_warnings([run])
    assert f"loss_agg_mode {agg}" in warning and PAPER_LOSSES["gspo"].agg_mode in warning
    paper = make_run("{algorithm: {verl_loss_mode: gspo, loss_agg_mode: seq-mean-token-mean, clip_low: 1.0e-3, "
                     "clip_high: 2.0e-3}}")
    assert builtin_loss_warnings([paper]) == []  # a tuned clip of the paper's kind is not a departure


def test_verl_loss_mode_is_refused_where_it_cannot_mean_one_thing(make_run, write_yaml):
    with pytest.raises(SpecError, match="both name the loss"):
        make_run("{algorithm: {loss: gspo, verl_loss_mode: gspo}}")
    with pytest.raises(SpecError, match="inject_delta wrap cancelctl's losses"):
        make_run("{algorithm: {verl_loss_mode: gspo, inject_delta: {delta: 1.0}}}")
    lab = write_yaml("name: l\nbase: {backend: lab}\narms:\n  a: {algorithm: {verl_loss_mode: gspo}}\n")
    from cancelctl.spec.expand import load_sweep

    with pytest.raises(SpecError, match="backend lab runs cancelctl's losses"):
        load_sweep(lab)


def test_the_field_leaves_every_existing_run_id_as_it_was(make_run):
    """Run ids hash the dumped spec: an arm that does not name a built-in loss dumps no verl_loss_mode."""
    plain, builtin = make_run("{algorithm: {loss: gspo}}"), make_run("{algorithm: {verl_loss_mode: gspo}}")
    assert "verl_loss_mode" not in plain.spec.algorithm.model_dump()
    assert builtin.spec.algorithm.model_dump()["verl_loss_mode"] == "gspo" and builtin.run_id != plain.run_id
