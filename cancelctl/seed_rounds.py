"""The rounds of seeds a sweep run until decided has added (`cancelctl sweep --until-decided`): which
seeds each look holds, per arm and comparison group. One JSON file beside the manifest
(`sweeps/<sweep>/seed_rounds.json`), rewritten atomically, and written before a round's runs are
submitted — so a `sweep --until-decided` killed anywhere resumes from it and the run folders, and
`report` judges every claim at the looks recorded here.

Look 1 holds the sweep file's seeds (every arm, every group); look L + 1 adds round L's seeds to
the arms (and groups) whose claims were still undecided at look L. New seeds continue after the
largest seed in use, the same for every arm of a round, so the two arms of a claim stay paired.

Schema (version 1)::

    {"version": 1, "sweep": "lab-claims-dfpo", "initial_seeds": [0, 1, 2, 3, 4], "batch": 2,
     "max_seeds": 12, "alpha": 0.05,
     "rounds": [[{"arm": "gspo", "group": "", "seeds": [5, 6]}, ...], ...]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cancelctl.errors import WorkdirStateError
from cancelctl.fileio import atomic_write_json, read_json

SEED_ROUNDS_VERSION = 1
SEED_ROUNDS_JSON = "seed_rounds.json"

Cell = tuple[str, str]  # (arm, comparison group)


@dataclass
class SeedRounds:
    sweep: str
    initial_seeds: list[int]
    batch: int
    max_seeds: int
    alpha: float
    rounds: list[dict[Cell, list[int]]] = field(default_factory=list)

    @property
    def n_looks(self) -> int:
        return 1 + len(self.rounds)

    def seeds_at(self, look: int, arm: str, group: str) -> set[int]:
        """The seeds of (arm, group) at look `look` (1-based; later looks than recorded: the last)."""
        seeds = set(self.initial_seeds)
        for added in self.rounds[: max(0, look - 1)]:
            seeds.update(added.get((arm, group), ()))
        return seeds

    def added(self) -> dict[Cell, list[int]]:
        """Every seed added so far, per (arm, group), in the order added."""
        out: dict[Cell, list[int]] = {}
        for added in self.rounds:
            for cell, seeds in added.items():
                out.setdefault(cell, []).extend(seeds)
        return out

    def next_seed(self) -> int:
        """The first seed after every seed in use."""
        used = [*self.initial_seeds, *(s for seeds in self.added().values() for s in seeds)]
        return max(used) + 1 if used else 0

    def with_round(self, added: dict[Cell, list[int]]) -> SeedRounds:
        return SeedRounds(self.sweep, list(self.initial_seeds), self.batch, self.max_seeds, self.alpha,
                          [*self.rounds, {cell: list(seeds) for cell, seeds in added.items()}])

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SEED_ROUNDS_VERSION, "sweep": self.sweep, "initial_seeds": list(self.initial_seeds),
            "batch": self.batch, "max_seeds": self.max_seeds, "alpha": self.alpha,
            "rounds": [[{"arm": arm, "group": group, "seeds": list(seeds)} for (arm, group), seeds in added.items()]
                       for added in self.rounds],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SeedRounds:
        if data.get("version") != SEED_ROUNDS_VERSION:
            raise ValueError(f"version {data.get('version')!r} is not {SEED_ROUNDS_VERSION}")
        rounds = [{(str(c["arm"]), str(c["group"])): [int(s) for s in c["seeds"]] for c in added}
                  for added in data["rounds"]]
        return cls(str(data["sweep"]), [int(s) for s in data["initial_seeds"]], int(data["batch"]),
                   int(data["max_seeds"]), float(data["alpha"]), rounds)


def load_seed_rounds(path: Path) -> SeedRounds | None:
    """The record at `path`, None when there is none (the sweep never ran until decided). A file that
    is there but not a record is refused (WorkdirStateError naming it), never taken for none."""
    path = Path(path)
    if not path.exists():
        return None
    data = read_json(path)
    try:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return SeedRounds.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise WorkdirStateError(f"{path}: unreadable record of the seed rounds ({exc}); move it aside to start "
                                "the rounds over (the finished runs are kept and reused)") from None


def save_seed_rounds(path: Path, rounds: SeedRounds) -> None:
    atomic_write_json(Path(path), rounds.to_json())
