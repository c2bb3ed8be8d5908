"""The chaos soak's short variant (benchmarks/chaos_soak.py): 40+ lab runs on the CI cluster while
slurmctld restarts, slurmdbd stops, sacct/squeue hang, fail and garble, jobs are requeued and killed
(scontrol requeue, and submitit's USR2 time-limit warning), frozen (the stall watchdog's case), a run
crosses time limits beside it (at least three one-minute allocations, each step once, one MLflow run),
and the launcher is SIGTERMed and SIGKILLed mid-submit — what tests/slurm/test_slurm_cluster.py once
checked one at a time; counted afterwards from sacct's history and the store. It restarts the cluster's daemons: the slurm tests run one after another (the `machine`
xdist group), so no other test is using the cluster meanwhile."""

from __future__ import annotations

from figures import record_figure
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_gate import cluster_problem

_PROBLEM = cluster_problem() or (None if os.geteuid() == 0 else "restarting slurmctld/slurmdbd needs root")
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")]

ROOT = Path(__file__).resolve().parents[2]


def test_the_soaks_time_limit_run_plans_more_time_outs_than_submitit_allows_by_default(tmp_path, monkeypatch):
    """The run across one-minute allocations beside the soak is planned for at least three, with more
    time-outs than submitit's default count (3): the planned count is what lets it finish."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from chaos_soak import TIME_LIMIT_STEP_PAUSE_S, write_time_limit_sweep

    from cancelctl.backends.lab.step_cost import STEP_PAUSE_ENV
    from cancelctl.jobs.time_limit import time_limit_plan
    from cancelctl.spec.expand import load_sweep

    monkeypatch.setenv(STEP_PAUSE_ENV, TIME_LIMIT_STEP_PAUSE_S)  # as the soak submits it: counted by the plan too
    (run,) = load_sweep(write_time_limit_sweep(tmp_path, "timelimit")).runs
    plan = time_limit_plan(run)
    assert plan.allocations >= 3 and plan.max_timeouts > 3, plan


def test_a_chaos_soak_loses_nothing_duplicates_nothing_and_reports_what_an_undisturbed_sweep_does(tmp_path):
    figures_path = tmp_path / "soak.json"
    # settle: up to 360 s after the fault window for the reruns and the time-limit run (6-9 one-minute
    # allocations on loaded cores, ~300 s: 240 s once left it at step 38 of 40); the loop ends when all are
    # done, and at its worst the soak ends ~480 s in, inside the timeout
    soak = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chaos_soak.py"), "--runs", "40", "--window", "25", "--seed", "1",
         "--settle", "360", "--folder", str(tmp_path / "soak"), "--json", str(figures_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert figures_path.exists(), soak.stdout[-3000:] + soak.stderr[-3000:]
    figures = json.loads(figures_path.read_text())
    record_figure("chaos soak: " + json.dumps(figures))  # the note's figures, in the CI log
    assert figures["runs_completed"] == figures["runs_planned"] >= 40, figures
    assert figures["duplicate_points"] == 0 and figures["lost_points"] == 0, figures
    assert figures["overlapping_attempts"] == [], figures  # no run trained twice at once
    assert figures["submissions_whose_answer_was_lost"].get("unconfirmed", 0) == 0, figures  # all resolved by name
    assert figures["tracebacks"] == 0, figures["traceback_samples"]
    assert figures["report_ok"] and figures["report_differences"] == [], figures["report_differences"]
    injected = figures["faults"]
    for kind in ("slurmctld_restart", "slurmdbd_stop", "launcher_SIGTERM", "launcher_SIGKILL", "requeue_job",
                 "time_limit_warning", "kill_job", "sbatch_answer_lost", "stall_job"):
        assert injected.get(kind, 0) >= 1, (kind, injected)
    assert sum(injected.get(k, 0) for k in ("queries_hang", "queries_fail", "queries_garbage")) >= 1, injected
    stalls = figures["stalls"]  # each frozen job caught (a job fault may end a frozen one first: at least one recorded)
    assert stalls["left_frozen"] == 0 and 1 <= stalls["recorded"], stalls
    time_limited = figures["time_limit_run"]  # across one-minute allocations, each step once, one MLflow run
    # >= 3 allocations (the plan above), each left at a step boundary and requeued, the last one finishing
    assert time_limited["state"] == "completed" and time_limited["allocations"] >= 3, time_limited
    assert time_limited["ends"][-1] == "finished" and set(time_limited["ends"][:-1]) <= {"requeued"}, time_limited
    assert time_limited["runs_checked_of_it"] == 1, time_limited
    assert time_limited["duplicate_points_of_it"] == 0 and time_limited["lost_points_of_it"] == 0, time_limited
    assert soak.returncode == 0, soak.stdout[-2000:]
