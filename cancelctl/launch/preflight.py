"""Planning's checks against the world outside the sweep file, made before a launch writes anything:

- per-backend refusals: each run's backend says why it cannot run it yet
  (`cancelctl.backends.protocol.Backend.launch_refusals`, found through the spec's catalog: launch
  imports no backend); those runs are refused with the arm's file:line;
- runs already FINISHED in their tracking store under the same run id (a shared MLflow server):
  the launcher adopts them instead of running them twice.

Launch calls these; it never imports a backend's renderer nor re-reads the YAML. (The spec's own
checks, compute matching and identical arms, are made when the file is expanded: `cancelctl.spec.expand`.)
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cancelctl.errors import SpecError, SpecIssue
from cancelctl.spec.backends import resolve_backend
from cancelctl.spec.yamlpos import Location

if TYPE_CHECKING:
    from cancelctl.spec.expand import Sweep
    from cancelctl.spec.run import RunSpec

def refuse_unlaunchable(sweep: Sweep) -> None:
    """SpecError (nothing submitted) naming arm, file:line and runs for every run whose backend
    refuses it: those would fail only once their job holds GPUs."""
    by_arm: dict[tuple[str, str, str], list[str]] = {}
    for run in sweep.runs:
        for reason in resolve_backend(run.spec.backend).launch_refusals(run):
            by_arm.setdefault((run.spec.backend, run.arm, reason), []).append(run.name)
    if not by_arm:
        return
    issues = [
        SpecIssue(
            sweep.arm_locations.get(arm) or Location(sweep.file, 1, 1),
            f"arms.{arm}",
            reason,
            f"{len(names)} run{'s' if len(names) > 1 else ''}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}",
        )
        for (_, arm, reason), names in by_arm.items()
    ]
    backends = ", ".join(sorted({backend for backend, _, _ in by_arm}))
    raise SpecError(issues, title=f"the {backends} backend cannot launch these runs yet; nothing submitted")


def refuse_tracking_credentials(runs: Iterable[RunSpec], workdir: Path, *, ask_stores: bool = True) -> None:
    """Nothing is submitted when a run's tracking URI holds a password (a spec's is refused when the
    file loads; this one came from $MLFLOW_TRACKING_URI: `PasswordInUri`), or, with `ask_stores`, a
    store refuses the credentials its jobs would log with (`CredentialsRefused`, one line saying
    which and where they come from). A store that cannot be reached is not refused here: its runs
    go on and `cancelctl sync` uploads later (`unusable_tracking_stores`)."""
    from cancelctl.tracking import tracking_target
    from cancelctl.tracking.uri import check_credentials

    uris = sorted({tracking_target(run, workdir)[0] for run in runs})
    for uri in uris if ask_stores else ():
        check_credentials(uri)


def unusable_tracking_stores(runs: Iterable[RunSpec], workdir: Path) -> dict[str, str]:
    """Tracking store URI -> why it cannot be written now, each store probed once (seconds at most:
    MLflow itself retries a bad sqlite path or a dead server for minutes)."""
    from cancelctl.tracking import tracking_target
    from cancelctl.tracking.uri import probe_store

    uris = sorted({tracking_target(run, workdir)[0] for run in runs})
    return {uri: problem for uri in uris if (problem := probe_store(uri)) is not None}


def finished_in_tracking_store(
    runs: Iterable[RunSpec], workdir: Path, skip: Container[str] = ()
) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """Runs whose MLflow store already holds them FINISHED (same run id: same resolved spec and
    seed, e.g. run by a colleague against a shared tracking server): run id -> (MLflow run, store
    URI), plus a warning per store that could not be asked (its runs are run, as before). Stores
    in `skip` (known unusable, already said) are not asked."""
    from cancelctl.tracking import finished_runs, tracking_target

    by_store: dict[tuple[str, str], set[str]] = {}
    for run in runs:
        by_store.setdefault(tracking_target(run, workdir), set()).add(run.run_id)
    found: dict[str, tuple[Any, str]] = {}
    warnings: list[str] = []
    for (uri, experiment), run_ids in by_store.items():
        if uri in skip:
            continue
        try:
            finished = finished_runs(uri, experiment, run_ids)
        except Exception as exc:  # noqa: BLE001 - an unreachable store: run them, as before
            warnings.append(f"could not look for finished runs in {uri} ({type(exc).__name__}: {exc})")
            continue
        found.update({run_id: (mlflow_run, uri) for run_id, mlflow_run in finished.items()})
    return found, warnings
