"""The MLflow tags cancelctl puts on a run, in one place: set at launch (`run_tags`), read by
collect (`TAG_COLUMNS`) and by the store lookups (`RUN_ID_TAG`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

PREFIX = "cancelctl."
RUN_ID_TAG = "cancelctl.run_id"  # authoritative: the MLflow run of a cancelctl run is found by it
SWEEP_TAG = "cancelctl.sweep"
ARM_TAG = "cancelctl.arm"
SEED_TAG = "cancelctl.seed"
GROUP_TAG = "cancelctl.group"
G_TAG = "cancelctl.G"
SPEC_HASH_TAG = "cancelctl.spec_hash"
AXES_TAG = "cancelctl.axes"  # JSON {axis path: value}
GIT_SHA_TAG = "cancelctl.git_sha"
VERSION_TAG_PREFIX = "cancelctl.version."
STOPPED_BY_TAG = "cancelctl.stopped_by"  # the monitor rule that stopped the run (cancelctl.jobs.monitor)
STOPPED_AT_STEP_TAG = "cancelctl.stopped_at_step"
STALLS_TAG = "cancelctl.stalls"  # attempts the stall watchdog ended (cancelctl.jobs.watchdog)
LAST_STALL_TAG = "cancelctl.last_stall"  # the latest one, as a sentence naming its stacks
HARDWARE_TAG_PREFIX = "cancelctl.hardware."  # + each of HARDWARE_FIELDS, set by the job (cancelctl.jobs.hardware)
HARDWARE_FIELDS = ("host", "cpu", "cpu_kernels", "gpu", "torch", "cuda", "driver", "threads")
HARDWARE_COLUMNS = {field: "hardware_" + field for field in HARDWARE_FIELDS}  # collect's runs frame
RUN_NAME_TAG = "mlflow.runName"
MLFLOW_GIT_COMMIT_TAG = "mlflow.source.git.commit"

TAG_COLUMNS = {  # tag set at launch -> column of collect's runs frame
    SWEEP_TAG: "sweep",
    ARM_TAG: "arm",
    GROUP_TAG: "group",
    SEED_TAG: "seed",
    G_TAG: "G",
    SPEC_HASH_TAG: "spec_hash",
    **{HARDWARE_TAG_PREFIX + field: column for field, column in HARDWARE_COLUMNS.items()},
}


def run_tags(run: RunSpec) -> dict[str, str]:
    """The tags of a run's MLflow run (all strings, as MLflow stores them)."""
    return {
        SWEEP_TAG: run.sweep,
        ARM_TAG: run.arm,
        SEED_TAG: str(run.seed),
        GROUP_TAG: run.group,
        G_TAG: str(run.G),
        SPEC_HASH_TAG: run.spec_hash,
        AXES_TAG: json.dumps(run.axes, sort_keys=True, default=str),
        RUN_ID_TAG: run.run_id,
    }


def hardware_tags(hardware: dict[str, str]) -> dict[str, str]:
    """The tags saying what a run's latest attempt ran on (`cancelctl.jobs.hardware.describe_hardware`)."""
    return {HARDWARE_TAG_PREFIX + field: hardware.get(field, "") for field in HARDWARE_FIELDS}


def stopped_tags(rule: str, step: int) -> dict[str, str]:
    """The tags of a run a monitor rule stopped (set by the job when it ends)."""
    return {STOPPED_BY_TAG: rule, STOPPED_AT_STEP_TAG: str(step)}


def stall_tags(stalls: list[dict], sentence) -> dict[str, str]:
    """The tags of a run the stall watchdog ended at least once (`stalls`: their attempts.jsonl lines;
    `sentence`: watchdog.stall_sentence), set by the next attempt or when its failure is settled."""
    return {STALLS_TAG: str(len(stalls)), LAST_STALL_TAG: sentence(stalls[-1])} if stalls else {}


def tracking_target(run: RunSpec, workdir: Path) -> tuple[str, str]:
    """(MLflow URI, experiment) of a run: the spec's, else the work dir's sqlite store and the sweep name."""
    from cancelctl.tracking.uri import resolve_tracking_uri

    return resolve_tracking_uri(run.spec.tracking.uri, workdir), run.spec.tracking.experiment or run.sweep
