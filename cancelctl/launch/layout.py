"""Where a sweep's files live in the work dir (see the package docstring for the whole tree)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cancelctl.manifest import ManifestStore

SWEEPS = "sweeps"


@dataclass(frozen=True)
class SweepPaths:
    workdir: Path
    sweep: str

    @property
    def sweep_dir(self) -> Path:
        return self.workdir / SWEEPS / self.sweep

    @property
    def manifest(self) -> Path:
        return self.sweep_dir / "manifest.json"

    @property
    def store(self) -> ManifestStore:
        return ManifestStore(self.manifest)

    @property
    def submit_lock(self) -> Path:
        """Held by a launcher while it talks to the scheduler, and by every sbatch it starts."""
        return self.sweep_dir / "submit.lock"

    @property
    def runs_dir(self) -> Path:
        return self.sweep_dir / "runs"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    @property
    def submitit_dir(self) -> Path:
        return self.sweep_dir / "submitit"

    @property
    def driver_log(self) -> Path:
        return self.sweep_dir / "driver.log"

    @property
    def cache_dir(self) -> Path:
        return self.workdir / "cache"


def sweep_paths(workdir: Path, sweep: str) -> SweepPaths:
    return SweepPaths(Path(workdir).resolve(), sweep)


def known_sweeps(workdir: Path) -> list[str]:
    root = Path(workdir) / SWEEPS
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/manifest.json"))
