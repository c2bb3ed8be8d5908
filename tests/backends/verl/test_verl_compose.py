"""Offline composition against verl 0.9.1's installed config (marker `verl`; CI installs the extra).

verl is imported once per process (~5-10 s) and the composer is shared, so the file stays well
under a minute even though every experiment is composed.
"""

from __future__ import annotations

from figures import record_figure
import dataclasses
import time

import pytest
from verl_helpers import EXPERIMENTS, run_by_name, verl_runs

pytestmark = pytest.mark.verl
pytest.importorskip("hydra", reason="hydra-core not installed (extra 'verl')")
pytest.importorskip("omegaconf")
if not __import__("importlib.util").util.find_spec("verl"):
    pytest.skip("verl==0.9.1 not installed (extra 'verl')", allow_module_level=True)

from omegaconf import OmegaConf  # noqa: E402

from cancelctl.backends.verl import compose_run, validate_runs  # noqa: E402
from cancelctl.backends.verl.compose import VerlComposer, verl_config_dir  # noqa: E402
from cancelctl.backends.verl.render import render_overrides  # noqa: E402

VERL_EXPERIMENTS = ["group-size", "dfpo-vs-gspo", "clip-strength", "delta-injection", "variance-noise", "batching"]


@pytest.fixture(scope="module")
def all_experiments():
    runs = [r for name in VERL_EXPERIMENTS for r in verl_runs(f"{name}.yaml")]
    start = time.perf_counter()
    result = validate_runs(runs)
    return runs, result, time.perf_counter() - start


def test_every_experiment_composes(all_experiments):
    runs, result, seconds = all_experiments
    assert list(result) == [], "\n".join(map(str, result))
    assert not result.skipped and f"{len(runs)} runs" in result.status
    # seeds / run names share a compose: one per (arm, grid point)
    assert result.composes < len(runs)
    record_figure(f"validated {len(runs)} verl runs ({result.composes} composes) in {seconds:.1f}s: {result.status}")


def test_deep_checks_ran(all_experiments):
    _, result, _ = all_experiments
    assert "validate_config" in result.status and "skipped" not in result.status


def test_fast_path_equals_full_hydra_compose():
    run = run_by_name("dfpo-vs-gspo.yaml", "dfpo-orth-proj-s1")
    composer = VerlComposer(verl_config_dir(), deep=False)
    full = composer.compose("ppo_megatron_trainer", render_overrides(run))
    OmegaConf.resolve(full)
    assert OmegaConf.to_container(compose_run(run)) == OmegaConf.to_container(full)


def test_megatron_spec_composes_megatron_config():
    cfg = compose_run(verl_runs("clip-strength.yaml")[0])
    assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert cfg.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == 4
    assert cfg.actor_rollout_ref.ref.megatron.tensor_model_parallel_size == 4  # ref follows the actor


def test_tis_reaches_rollout_correction(make_run):
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose_run(make_run("{algorithm: {tis: {cap: 1.5}}}"))
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert algo.rollout_correction["rollout_is"] == "token"
    assert algo.rollout_correction["rollout_is_threshold"] == 1.5


def test_dfpo_options_reach_policy_loss_dataclass():
    from verl.utils.config import omega_conf_to_dataclass

    from cancelctl.backends.verl.config import CancelPolicyLossConfig

    run = run_by_name("dfpo-vs-gspo.yaml", "dfpo-no-stopgrad-s0")
    actor = omega_conf_to_dataclass(compose_run(run).actor_rollout_ref.actor)
    loss = actor.policy_loss
    assert isinstance(loss, CancelPolicyLossConfig)
    assert (loss.loss_mode, loss.transform, loss.stop_grad, loss.scale, loss.group_size) == (
        "cancel_dfpo", "min_replace", False, None, 32)
    assert loss.get("eps1") == 0.05  # the losses read options through BaseConfig.get
    scaled = omega_conf_to_dataclass(compose_run(run_by_name("dfpo-vs-gspo.yaml", "dfpo-scale-0.5-s0")).actor_rollout_ref.actor)
    assert scaled.policy_loss.scale == 0.5
    assert actor.ppo_micro_batch_size_per_gpu % 32 == 0 and actor.shuffle is False


def test_wrapper_options_reach_policy_loss_dataclass():
    from verl.utils.config import omega_conf_to_dataclass

    delta = omega_conf_to_dataclass(compose_run(run_by_name("delta-injection.yaml", "delta-3-s0")).actor_rollout_ref.actor)
    assert (delta.policy_loss.inject_delta, delta.policy_loss.inject_delta_p_low) == (3.0, 0.1)
    noise = omega_conf_to_dataclass(compose_run(run_by_name("variance-noise.yaml", "sigma-0.2-s1")).actor_rollout_ref.actor)
    assert (noise.policy_loss.inject_noise_sigma, noise.policy_loss.inject_noise_seed) == (0.2, 1)


def test_policy_loss_defaults_match_the_spec():
    from cancelctl.backends.verl.config import CancelPolicyLossConfig
    from cancelctl.backends.verl.render import POLICY_LOSS_TARGET
    from cancelctl.spec.experiment import AlgorithmSpec, DeltaSpec, DfpoSpec, NoiseSpec

    d = CancelPolicyLossConfig()
    spec_dfpo, alg = DfpoSpec(), AlgorithmSpec()
    assert (d.transform, d.stop_grad, d.scale, d.eps1) == (spec_dfpo.transform, spec_dfpo.stop_grad, spec_dfpo.scale, spec_dfpo.eps1)
    assert d.inject_delta_p_low == DeltaSpec(delta=1).p_low and NoiseSpec().sigma == 0.2
    assert d.monitor_delta == alg.monitor_delta
    assert f"{CancelPolicyLossConfig.__module__}.{CancelPolicyLossConfig.__qualname__}" == POLICY_LOSS_TARGET


def test_typo_in_template_is_reported_with_run_and_key(make_run, tmp_path, monkeypatch):
    (tmp_path / "tpl" / "verl").mkdir(parents=True)
    (tmp_path / "tpl" / "verl" / "typo.yaml").write_text(
        "extends: fsdp\noverrides:\n  actor_rollout_ref.actor.ppo_epoch: 2\n  trainer.save_frequency: 10\n"
    )
    monkeypatch.setenv("CANCELCTL_TEMPLATES", str(tmp_path / "tpl"))
    run = make_run("{model: {template: typo}}")
    issues = validate_runs([run])
    assert [i.override for i in issues] == ["actor_rollout_ref.actor.ppo_epoch=2", "trainer.save_frequency=10"]
    assert all(i.run == run.name and "Could not override" in i.message for i in issues)
    assert str(issues[0]).startswith(f"run {run.name} ({run.run_id}): actor_rollout_ref.actor.ppo_epoch=2: ")


def test_bad_value_in_template_is_reported(make_run, tmp_path, monkeypatch):
    (tmp_path / "tpl" / "verl").mkdir(parents=True)
    (tmp_path / "tpl" / "verl" / "bad.yaml").write_text(
        "extends: fsdp\noverrides:\n  actor_rollout_ref.actor.ppo_max_token_len_per_gpu: lots\n"
    )
    monkeypatch.setenv("CANCELCTL_TEMPLATES", str(tmp_path / "tpl"))
    run = make_run("{model: {template: bad}}")
    issues = validate_runs([run])
    assert len(issues) == 1 and issues[0].run == run.name
    assert issues[0].override == "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=lots"
    assert "lots" in issues[0].message


def test_bogus_loss_agg_mode_is_reported(make_run):
    run = make_run()
    algorithm = run.spec.algorithm.model_copy(update={"loss_agg_mode": "token-bogus"})  # skips pydantic on purpose
    run = dataclasses.replace(run, spec=run.spec.model_copy(update={"algorithm": algorithm}))
    issues = validate_runs([run])
    assert len(issues) == 1 and issues[0].run == run.name
    assert issues[0].override == "actor_rollout_ref.actor.loss_agg_mode=token-bogus"
    assert "Invalid loss_agg_mode" in issues[0].message


def test_render_refusal_is_an_issue_not_a_crash(make_run):
    run = make_run("{model: {template: nope}}")
    (issue,) = validate_runs([run])
    assert issue.run == run.name and issue.override == "model.template" and "unknown verl template" in issue.message


def test_loss_registered_by_plugin(all_experiments):
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    if "cancel_grpo" not in POLICY_LOSS_REGISTRY:
        pytest.skip("losses.verl_plugin not loaded through the verl.plugins entry point")
    assert {"cancel_grpo", "cancel_dapo", "cancel_gspo", "cancel_grpo_symclip", "cancel_dfpo"} <= set(POLICY_LOSS_REGISTRY)


def test_example_files_exist():
    assert all((EXPERIMENTS / f"{n}.yaml").is_file() for n in VERL_EXPERIMENTS)


def test_builtin_losses_compose_and_a_name_verl_lacks_is_refused(make_run):
    """algorithm.verl_loss_mode names verl's own registry: gspo composes (its paper departures are
    validate's warnings, tests/backends/verl/test_verl_builtin_losses.py); a typo is refused with
    verl's built-in names."""
    assert list(validate_runs([make_run("{algorithm: {verl_loss_mode: gspo}}")])) == []
    [issue] = validate_runs([make_run("{algorithm: {verl_loss_mode: vanila}}")])
    assert issue.override == "actor_rollout_ref.actor.policy_loss.loss_mode=vanila"
    assert "verl has no built-in loss 'vanila'" in issue.message and "vanilla" in issue.message
    assert "cancel_" not in issue.message.split("its own:")[1]
