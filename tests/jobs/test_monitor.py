import json
import math
import random
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cancelctl.backends.lab.checkpoint import CHECKPOINT
from cancelctl.jobs.monitor import (
    ALERTS_JSONL,
    LR_SPIKE_ENV,
    Alert,
    Monitor,
    RunMonitor,
    read_alerts,
    read_alerts_from,
    read_stop,
)
from cancelctl.spec.experiment import ExperimentSpec
from cancelctl.spec.monitor import MonitorSpec
from cancelctl.tracking.runfiles import METRICS_JSONL, encode_metrics_line

sys.path.insert(0, str(Path(__file__).parents[1] / "backends" / "lab"))
from lab_helpers import lab_run, run_lab  # noqa: E402

LAB = {"mismatch/rho_std": "mismatch/rho_std", "mismatch/pcc": "mismatch/pcc"}
# the same quantities under verl's own names (rollout_correction metrics, verl/utils/debug/metrics.py)
VERL = {"mismatch/rho_std": "rollout_corr/rollout_is_std", "mismatch/pcc": "training/rollout_actor_probs_pearson_corr"}


def healthy_step(step: int) -> dict[str, float]:
    return {"mismatch/rho_std": 1.0, "mismatch/pcc": 1.0, "actor/entropy": 0.5, "critic/score/mean": 0.8}


def stream(changes: dict[str, float], from_step: int, steps: int = 60, names=LAB):
    """Healthy values, then `changes` from `from_step` on (spelled as `names` spells them)."""
    for step in range(1, steps + 1):
        metrics = healthy_step(step)
        if step >= from_step:
            metrics.update(changes)
        yield step, {names.get(k, k): v for k, v in metrics.items()}


def alerts_of(monitor: Monitor, points) -> list[Alert]:
    return [alert for step, metrics in points for alert in monitor.observe(step, metrics)]


# Windows of 10 steps; the change starts at step 21, so step 20 + k has k changed values in the
# last window. Each expected step is the first k that crosses the threshold strictly.
@pytest.mark.parametrize("names", [LAB, VERL], ids=["lab-keys", "verl-keys"])
@pytest.mark.parametrize(
    ("changes", "rule", "step"),
    [
        # median of (10 − k) × 1.0 and k × 4.0 ≥ 3  ⇔  k ≥ 6 (k = 5: (1 + 4) / 2)
        ({"mismatch/rho_std": 4.0}, "mismatch_growth", 26),
        # 1 − 0.01k < 0.95  ⇔  k > 5
        ({"mismatch/pcc": 0.9}, "pcc_drop", 26),
        # fast fall: 0.5 − 0.05k < 0.5 · 0.5  ⇔  k > 5
        ({"actor/entropy": 0.0}, "entropy_collapse", 26),
        # a 20-step window: 0.8 − 0.0375k < 0.5 · 0.8  ⇔  k > 10.67
        ({"critic/score/mean": 0.05}, "reward_collapse", 31),
        ({"actor/pg_loss": math.nan}, "nonfinite", 21),
    ],
)
def test_each_rule_fires_once_at_exactly_its_step(changes, rule, step, names):
    alerts = alerts_of(Monitor(), stream(changes, 21, names=names))
    assert [(a.rule, a.step) for a in alerts] == [(rule, step)]  # once: the condition persists to step 60
    assert alerts[0].action == MonitorSpec().model_dump()[rule]["action"]


def test_entropy_floor_without_a_fast_fall():
    spec = MonitorSpec.model_validate({"entropy_collapse": {"fall": 1e-9}})
    [alert] = alerts_of(Monitor(spec), stream({"actor/entropy": 0.0}, 21))
    # 0.05 (10 − k) < 0.01  ⇔  k > 9.8
    assert (alert.step, alert.threshold) == (30, 0.01)
    assert "floor" in alert.message


def test_an_alert_that_clears_fires_again():
    points = list(stream({}, 1, steps=25))
    for step in (7, 8, 20):
        points[step - 1][1]["actor/grad_norm"] = math.inf
    assert [a.step for a in alerts_of(Monitor(), points)] == [7, 20]


def test_rules_turned_off_and_missing_keys_are_silent():
    off = MonitorSpec.model_validate({"mismatch_growth": {"action": "off"}})
    assert alerts_of(Monitor(off), stream({"mismatch/rho_std": 4.0}, 21)) == []
    # steps without the metric (eval-only lines) neither count nor break the window
    points = [(s, {"val-core/lab/acc/mean_at_4": 0.5}) if s % 2 else (s, m) for s, m in stream({"mismatch/rho_std": 4.0}, 41, 100)]
    [alert] = alerts_of(Monitor(), points)
    assert alert.rule == "mismatch_growth" and alert.step == 52  # 6th even step from 42


def test_fp32_rollouts_zero_mismatch_never_alert():
    points = [(s, dict(m, **{"mismatch/rho_std": 0.0})) for s, m in stream({}, 1, 50)]
    assert alerts_of(Monitor(), points) == []


def test_monitor_block_is_validated():
    with pytest.raises(ValueError, match="mismatch_growth.ratio"):
        ExperimentSpec.model_validate({"monitor": {"mismatch_growth": {"ratio": 0.5}}})
    with pytest.raises(ValueError, match="action"):
        ExperimentSpec.model_validate({"monitor": {"nonfinite": {"action": "kill"}}})
    with pytest.raises(ValueError, match="Extra inputs"):
        ExperimentSpec.model_validate({"monitor": {"entropy_colapse": {}}})


def test_monitor_settings_do_not_change_run_ids():
    tight = lab_run({"monitor": {"reward_collapse": {"drop": 0.2}}})
    assert tight.run_id == lab_run().run_id and tight.spec.monitor.reward_collapse.drop == 0.2


# ------------------------------------------------------------------ no false alarm at the defaults


@st.composite
def healthy_run(draw):
    """A healthy RLVR run (≥ 64 rollouts per step, mean reward ≥ 0.1: below that a 10-step mean is
    too noisy for a 50% drop to mean anything): reward rising to a plateau with binomial noise, entropy decaying to an
    asymptote (at most ~20% per 10 steps) with ±10% noise, a stationary ρ std (slow drift ≤ 1.5×,
    log-normal noise, rare 2× spikes) and a PCC a hair below 1."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    steps = draw(st.integers(1, 300))
    rollouts = draw(st.sampled_from([64, 128, 256, 1024]))
    p0, p1 = draw(st.floats(0.1, 0.7)), draw(st.floats(0.0, 0.3))
    e0, e_inf = draw(st.floats(0.2, 2.0)), draw(st.floats(0.05, 0.2))
    rate = draw(st.floats(0.0, 0.02))
    rho0, drift = draw(st.floats(1e-4, 1e-1)), draw(st.floats(1.0, 1.5))
    pcc_gap = draw(st.floats(0.0, 0.02))
    points = []
    for step in range(1, steps + 1):
        t = step / steps
        p = min(1.0, p0 + p1 * (1 - math.exp(-5 * t)))
        reward = min(1.0, max(0.0, rng.gauss(p, math.sqrt(p * (1 - p) / rollouts))))  # binomial, normal approx.
        entropy = (e_inf + (e0 - e_inf) * math.exp(-rate * step)) * rng.uniform(0.9, 1.1)
        rho = rho0 * (1 + (drift - 1) * t) * math.exp(rng.gauss(0, 0.3)) * (2.0 if rng.random() < 0.05 else 1.0)
        pcc = 1 - pcc_gap * rng.random()
        points.append((step, {"critic/score/mean": reward, "actor/entropy": entropy, "mismatch/rho_std": rho, "mismatch/pcc": pcc}))
    return points


@settings(max_examples=150, deadline=None)
@given(healthy_run())
def test_no_false_alarm_on_healthy_runs(points):
    assert alerts_of(Monitor(), points) == []


# ------------------------------------------------------------------ in the job: files, resume


def test_run_monitor_writes_alerts_and_the_stop(tmp_path):
    monitor = RunMonitor(MonitorSpec(), tmp_path)
    stops = [(s, monitor.observe(s, m)) for s, m in stream({"mismatch/rho_std": 4.0, "critic/score/mean": 0.05}, 21)]
    assert [s for s, stop in stops if stop is not None] == [31]
    assert [(a.rule, a.step, a.action) for a in read_alerts(tmp_path)] == [
        ("mismatch_growth", 26, "warn"),
        ("reward_collapse", 31, "stop"),
    ]
    stop = read_stop(tmp_path)
    assert (stop.rule, stop.step, stop.metric) == ("reward_collapse", 31, "critic/score/mean")
    assert stop.threshold == pytest.approx(0.4)


def test_non_finite_alert_round_trips_through_json(tmp_path):
    monitor = RunMonitor(MonitorSpec(), tmp_path)
    monitor.observe(3, {"actor/pg_loss": math.nan, "actor/grad_norm": math.inf})
    line = json.loads((tmp_path / ALERTS_JSONL).read_text())  # strict JSON: no bare NaN
    assert line["value"] == "Infinity" and line["metric"] == "actor/grad_norm"
    [alert] = read_alerts(tmp_path)
    assert alert.value == math.inf and alert.action == "stop" and read_stop(tmp_path).step == 3


def test_resumed_monitor_replays_history_without_repeating_alerts(tmp_path):
    points = list(stream({"mismatch/rho_std": 4.0}, 21))
    with open(tmp_path / METRICS_JSONL, "wb") as fh:
        for step, metrics in points[:30]:
            fh.write(encode_metrics_line(step, 0, metrics))
    first = RunMonitor(MonitorSpec(), tmp_path)
    for step, metrics in points[:30]:
        first.observe(step, metrics)
    assert [a.step for a in read_alerts(tmp_path)] == [26]
    # killed after step 30, resumed from a checkpoint at step 25: steps 26-30 are replayed live
    resumed = RunMonitor(MonitorSpec(), tmp_path, resume_step=25)
    for step, metrics in points[25:]:
        resumed.observe(step, metrics)
    assert [a.step for a in read_alerts(tmp_path)] == [26]
    # resumed after the alert: the windows already hold the growth, no second alert
    later = RunMonitor(MonitorSpec(), tmp_path, resume_step=30)
    assert all(later.observe(step, metrics) is None for step, metrics in points[30:])
    assert len(read_alerts(tmp_path)) == 1


def test_alert_reader_keeps_its_offset_and_waits_for_torn_lines(tmp_path):
    path = tmp_path / ALERTS_JSONL
    alert = Alert("pcc_drop", 4, "mismatch/pcc", 0.9, 0.95, "warn", "m")
    path.write_text(json.dumps(alert.to_json()) + "\n" + '{"rule": "pcc_dr')
    got, offset = read_alerts_from(path)
    assert got == [alert] and offset == len(json.dumps(alert.to_json())) + 1
    with open(path, "a") as fh:
        fh.write('op"}\nnot json\n')
    got, offset = read_alerts_from(path, offset)
    assert got == [] and offset == path.stat().st_size  # the malformed lines are skipped, not re-read


# ------------------------------------------------------------------ backends


@pytest.fixture(scope="module")
def lab_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("monitor-lab-cache")


def test_a_diverging_lab_run_is_stopped_with_its_checkpoint(tmp_path, lab_cache, monkeypatch):
    """×100 learning rate at step 12: the policy falls apart, reward goes to 0; the default
    reward_collapse rule stops the run (at step 28 today: its 20-step window's mean halves)."""
    monkeypatch.setenv(LR_SPIKE_ENV, "12:100")
    final, logger = run_lab(lab_run({"budget": {"steps": 36}}), tmp_path, lab_cache)
    stop = read_stop(tmp_path)
    assert stop is not None and stop.action == "stop"
    assert 12 < max(logger.steps()) == stop.step < 36 and final == logger.steps()[stop.step]
    assert stop.rule in ("reward_collapse", "entropy_collapse", "mismatch_growth")
    assert any(a.step == stop.step and a.rule == stop.rule for a in read_alerts(tmp_path))
    state = torch.load(tmp_path / CHECKPOINT, weights_only=False)
    assert state["progress"]["step"] == stop.step
    assert all(torch.isfinite(p).all() for p in state["model"].values())
    monkeypatch.delenv(LR_SPIKE_ENV)
    healthy = tmp_path / "healthy"
    _, logger = run_lab(lab_run({"budget": {"steps": 30}}), healthy, lab_cache)
    assert max(logger.steps()) == 30 and not (healthy / ALERTS_JSONL).exists() and read_stop(healthy) is None


def test_bad_lr_spike_variable_is_named(tmp_path, lab_cache, monkeypatch):
    monkeypatch.setenv(LR_SPIKE_ENV, "twelve")
    with pytest.raises(ValueError, match=LR_SPIKE_ENV):
        run_lab(lab_run(), tmp_path, lab_cache)


def test_verl_forwarder_path_raises_the_same_alert(tmp_path):
    """verl's file-logger lines (verl's key names) pumped by the job's MetricsForwarder, with the
    run's monitor observing each forwarded step: the same rule stops at the same step as the lab's."""
    from cancelctl.backends.verl.forward import MetricsForwarder

    verl_lines = tmp_path / "verl_metrics.jsonl"
    with open(verl_lines, "w") as fh:
        for step, metrics in stream({"critic/score/mean": 0.05}, 21, names=VERL):
            fh.write(json.dumps({"step": step, "data": {**metrics, "val-core/x/acc/mean@4": 0.5, "table": "t"}}) + "\n")
    monitor = RunMonitor(MonitorSpec(), tmp_path)
    stops = []

    def observe(step, metrics):
        if monitor.observe(step, metrics) is not None:
            stops.append(step)
        return metrics

    class Sink:
        def log(self, step, metrics):
            pass

    MetricsForwarder(verl_lines, Sink(), observe).pump()
    lab = alerts_of(Monitor(), stream({"critic/score/mean": 0.05}, 21))
    assert stops == [31] and [(a.rule, a.step) for a in read_alerts(tmp_path)] == [(a.rule, a.step) for a in lab]


def test_a_diverging_lab_run_launched_in_a_sweep_ends_stopped(tmp_path, template_db, monkeypatch):
    """The same ×100 learning-rate spike through launch_sweep (debug executor): the job records the
    run `stopped` with the rule and step, result.json and the checkpoint kept."""
    import shutil

    import yaml
    from lab_helpers import FAST

    from cancelctl.launch import launch_sweep, sweep_status
    from cancelctl.spec.expand import load_sweep

    monkeypatch.setenv(LR_SPIKE_ENV, "12:100")
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    base = {**FAST, "budget": {**FAST["budget"], "steps": 36}}
    path = tmp_path / "diverge.yaml"
    path.write_text(yaml.safe_dump({"name": "diverge", "base": base, "arms": {"grpo": {}}, "seeds": [0]}))
    result = launch_sweep(load_sweep(path), workdir=workdir, executor="debug")
    assert result.ok
    (state,) = sweep_status(workdir, "diverge")
    stop = read_stop(state.run_dir)
    assert state.state == "stopped" and stop is not None and 12 < stop.step < 36
    assert state.reason == f"{stop.rule} at step {stop.step}" and state.step == stop.step
    assert json.loads((state.run_dir / "result.json").read_text())["stopped"]["step"] == stop.step
    checkpoint = torch.load(state.run_dir / CHECKPOINT, weights_only=False)
    assert checkpoint["progress"]["step"] == stop.step
