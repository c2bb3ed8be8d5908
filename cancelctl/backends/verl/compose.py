"""Offline validation of rendered verl runs against verl's installed Hydra config
(docs/verl-internals.md#config-keys-and-offline-composition).

For each run: render (errors → issues), then compose the override list as `main_ppo` would,
`OmegaConf.resolve`, and, when `import verl` works (CPU is enough), verl's own `validate_config`,
`omega_conf_to_dataclass` of actor / rollout / algorithm with a check of the converted field types
(field_types.py), and a look-up of the loss in verl's
registry. Nothing reads the model path or data files.

Cost: composing verl's config from its dozens of YAML files is slow (validate's verl-layer line prints
what a sweep's composes took), so the base config is composed
once per config name and each override set is applied to a copy with Hydra's own override code
(`ConfigLoaderImpl._apply_overrides_to_config`, what `compose` runs after merging the defaults); if
that path reports anything, the run is composed again the full way and only errors that survive are
reported. Runs that differ only in seed / run name share one compose (`RUN_IDENTITY_KEYS`); their
own lines are still parsed by Hydra's grammar. verl is imported at most once per process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import pickle
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cancelctl.backends.verl.errors import VerlRenderError
from cancelctl.backends.verl.field_types import field_type_errors
from cancelctl.backends.verl.overrides import OverrideSet, Setting
from cancelctl.backends.verl.render import LOSS_PLUGIN_MODULE, RUN_IDENTITY_KEYS, config_name, render_override_set
from cancelctl.installed import installed
from cancelctl.spec.run import RunSpec
from losses.catalog import VERL_LOSS_PREFIX

SKIPPED = "verl layer skipped: verl not installed (pip install 'cancelctl[verl]')"
# Stand-ins for the per-run identity values: same type, so a shared compose checks the same thing.
_IDENTITY_PLACEHOLDER = {str: "run", int: 0}


@dataclass(frozen=True)
class RunIssue:
    """One problem of one run: the override line at fault (when known) and verl's/Hydra's message."""

    run: str
    run_id: str
    override: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.override}: " if self.override else ""
        return f"run {self.run} ({self.run_id}): {where}{self.message}"


class ValidationResult(list):
    """The issues (a list of RunIssue, empty = all composed) plus what was checked and how long it took."""

    def __init__(self, issues: Iterable[RunIssue] = (), *, status: str = "", skipped: bool = False):
        super().__init__(issues)
        self.status = status
        self.skipped = skipped
        self.composes = 0
        self.seconds = 0.0


def verl_available() -> bool:
    return all(installed(m) for m in ("verl", "hydra", "omegaconf"))


def verl_config_dir() -> Path:
    """verl's `trainer/config`, located without importing verl (that costs seconds)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("verl is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def validate_runs(runs: Iterable[RunSpec], *, deep: bool = True, progress=None) -> ValidationResult:
    """Render and compose every verl run; an empty result means every run composed cleanly.
    `progress(message)`, when given, hears what is being done (importing verl alone takes seconds)."""
    runs = [r for r in runs if r.spec.backend == "verl"]
    if not verl_available():
        return ValidationResult(status=SKIPPED, skipped=True)
    start = time.perf_counter()
    if progress is not None:
        progress(f"verl layer: importing verl and its Hydra config for {len(runs)} runs")
    composer = _composer(verl_config_dir(), deep)
    before = len(composer.cache)
    issues: list[RunIssue] = []
    for i, run in enumerate(runs, 1):
        if progress is not None and (i == 1 or i == len(runs) or i % max(1, len(runs) // 10) == 0):
            progress(f"verl layer: composing {run.name} ({i}/{len(runs)})")  # about ten lines however many runs
        issues.extend(composer.check(run))
    result = ValidationResult(issues)
    result.composes = len(composer.cache) - before
    result.seconds = time.perf_counter() - start
    result.status = (
        f"verl layer: {len(runs)} runs, {result.composes} new override sets composed against verl "
        f"{_verl_version()} in {result.seconds:.1f}s; {composer.depth_note()}"
    )
    return result


def compose_run(run: RunSpec):
    """The resolved config verl would run `run` with (an OmegaConf DictConfig); raises on errors."""
    from omegaconf import OmegaConf

    composer = _composer(verl_config_dir(), deep=False)
    config, lines = config_name(run), render_override_set(run).lines()
    cfg, findings = composer._apply_to_base(config, tuple(lines))
    if findings:
        cfg = composer.compose(config, lines)  # raises Hydra's error if the findings were real
    OmegaConf.resolve(cfg)
    return cfg


@dataclass
class Finding:
    override: str | None
    message: str


@dataclass
class VerlComposer:
    config_dir: Path
    deep: bool = True
    cache: dict[tuple[str, tuple[str, ...]], list[Finding]] = field(default_factory=dict)
    _bases: dict[str, bytes] = field(default_factory=dict)  # pickled: loads() is cheaper than a deepcopy
    _parsed: dict[str, Any] = field(default_factory=dict)  # override line -> Hydra Override
    _parser: Any = None

    def check(self, run: RunSpec) -> list[RunIssue]:
        try:
            overrides = render_override_set(run)
        except VerlRenderError as exc:
            return [RunIssue(run.name, run.run_id, exc.path, exc.message)]
        findings = [f for s in overrides.settings.values() if s.key in RUN_IDENTITY_KEYS for f in self._parse(s.line)]
        key = (config_name(run), tuple(_mask_identity(overrides).lines()))
        if key not in self.cache:
            self.cache[key] = self.compose_findings(*key)
        findings += self.cache[key]
        return [RunIssue(run.name, run.run_id, f.override, f.message) for f in findings]

    # ------------------------------------------------------------ composing

    def compose(self, config: str, lines: list[str]):
        """The config `python -m verl.trainer.main_ppo --config-name <config> <lines>` would see."""
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(self.config_dir), version_base=None):
            return compose(config_name=config, overrides=list(lines))

    def compose_findings(self, config: str, lines: tuple[str, ...]) -> list[Finding]:
        from hydra.errors import HydraException
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        cfg, findings = self._apply_to_base(config, lines)
        if findings:
            try:  # the authoritative path: settles group overrides the fast path cannot apply
                cfg, findings = self.compose(config, list(lines)), []
            except (HydraException, OmegaConfBaseException):
                # Hydra refuses the same lines: the fast path ran Hydra's own override code on each one
                # and every finding already names its line with Hydra's message, where compose would
                # stop at the first. Go on checking the config without the bad lines. Anything else
                # (a bug, a broken install) is not a finding about these lines and is not caught.
                pass
        applied = tuple(x for x in lines if x not in {f.override for f in findings})
        try:
            OmegaConf.resolve(cfg)
        except Exception as exc:
            return [*findings, Finding(None, f"interpolation: {_message(exc)}")]
        return findings + (self._verl_checks(cfg, applied) if self.deep else [])

    def _apply_to_base(self, config: str, lines: tuple[str, ...]):
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        if config not in self._bases:
            self._bases[config] = pickle.dumps(self.compose(config, []))
        cfg = pickle.loads(self._bases[config])
        findings: list[Finding] = []
        for line in lines:  # one at a time: every bad line is reported, not only the first
            try:
                ConfigLoaderImpl._apply_overrides_to_config([self._parse_line(line)], cfg)
            except Exception as exc:
                findings.append(Finding(line, _message(exc) + _did_you_mean(cfg, line)))
        return cfg, findings

    def _parse(self, line: str) -> list[Finding]:
        try:
            self._parse_line(line)
        except Exception as exc:
            return [Finding(line, _message(exc))]
        return []

    def _parse_line(self, line: str):
        if line not in self._parsed:
            if self._parser is None:
                from hydra.core.override_parser.overrides_parser import OverridesParser

                self._parser = OverridesParser.create()
            self._parsed[line] = self._parser.parse_override(line)
        return self._parsed[line]

    # ------------------------------------------------------------ verl's own checks

    def _verl_checks(self, cfg, lines: tuple[str, ...]) -> list[Finding]:
        from omegaconf import OmegaConf

        tools = _verl_tools()
        if isinstance(tools, str):
            return []
        findings: list[Finding] = []
        line_of = {x.split("=", 1)[0].lstrip("+"): x for x in lines}

        def attempt(what: str, check):
            try:
                with _quiet():
                    return check()
            except Exception as exc:
                message = _message(exc)
                findings.append(Finding(_blame(message, lines), f"verl {what}: {message}"))
                return None

        attempt("validate_config", lambda: tools.validate_config(
            cfg, use_reference_policy=tools.need_reference_policy(cfg), use_critic=tools.need_critic(cfg)))
        for section in ("actor_rollout_ref.actor", "actor_rollout_ref.rollout", "algorithm"):
            converted = attempt(f"{section} config", lambda: tools.to_dataclass(OmegaConf.select(cfg, section)))
            for key, problem in field_type_errors(converted, section, set(line_of)) if converted is not None else []:
                findings.append(Finding(line_of[key], f"verl {section} config: {problem}"))
        if tools.loss_registry is not None:
            mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
            if mode not in tools.loss_registry:
                line = next((x for x in lines if x.startswith("actor_rollout_ref.actor.policy_loss.loss_mode=")), None)
                if mode.startswith(VERL_LOSS_PREFIX):  # one of ours: the plugin did not register it
                    problem = f"loss {mode!r} is not registered in verl (by {LOSS_PLUGIN_MODULE})"
                else:  # algorithm.verl_loss_mode: a name of verl's own registry
                    builtin = ", ".join(sorted(n for n in tools.loss_registry if not n.startswith(VERL_LOSS_PREFIX)))
                    problem = f"verl has no built-in loss {mode!r} (algorithm.verl_loss_mode); its own: {builtin}"
                findings.append(Finding(line, problem))
        return _unique(findings)

    def depth_note(self) -> str:
        if not self.deep:
            return "verl's own checks skipped (deep=False)"
        tools = _verl_tools()
        if isinstance(tools, str):
            return f"verl's own checks skipped: {tools}"
        registry = (
            "loss registry checked"
            if tools.loss_registry is not None
            else f"loss registry not checked ({LOSS_PLUGIN_MODULE} not installed)"
        )
        return f"verl validate_config + dataclass conversion run; {registry}"


_COMPOSERS: dict[tuple[Path, bool], VerlComposer] = {}


def _composer(config_dir: Path, deep: bool) -> VerlComposer:
    """One per process and config dir: `cancelctl validate` calls validate_runs once per file."""
    key = (config_dir, deep)
    if key not in _COMPOSERS:
        _COMPOSERS[key] = VerlComposer(config_dir, deep=deep)
    return _COMPOSERS[key]


@dataclass
class _VerlTools:
    validate_config: Any
    to_dataclass: Any
    need_critic: Any
    need_reference_policy: Any
    loss_registry: dict | None


_TOOLS: _VerlTools | str | None = None


def _verl_tools() -> _VerlTools | str:
    """verl's checks, imported once per process (~5-10 s); a string says why they are unavailable."""
    global _TOOLS
    if _TOOLS is None:
        try:
            with _quiet():
                from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
                from verl.trainer.ppo.utils import need_critic, need_reference_policy
                from verl.utils.config import omega_conf_to_dataclass, validate_config
        except Exception as exc:  # e.g. no torch: composing alone still runs
            _TOOLS = f"import verl failed: {_message(exc)}"
        else:
            # `import verl` loads the `verl.plugins` entry point; only check the registry when the
            # plugin module exists at all, so a missing plugin is one note, not an error per run.
            registry = POLICY_LOSS_REGISTRY if installed(LOSS_PLUGIN_MODULE) else None
            _TOOLS = _VerlTools(validate_config, omega_conf_to_dataclass, need_critic, need_reference_policy, registry)
    return _TOOLS


# ---------------------------------------------------------------- helpers


def _mask_identity(overrides: OverrideSet) -> OverrideSet:
    masked = OverrideSet()
    for key, s in overrides.settings.items():
        if key in RUN_IDENTITY_KEYS:
            s = Setting(s.key, _IDENTITY_PLACEHOLDER[type(s.value)], add=s.add, literal=s.literal)
        masked.settings[key] = s
    return masked


def _did_you_mean(cfg, line: str) -> str:
    """For a key verl does not have: the closest existing keys next to it (typos are the usual cause)."""
    import difflib

    from omegaconf import DictConfig, OmegaConf

    key = line.split("=", 1)[0].lstrip("+~")
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig) or leaf in node:
        return ""
    close = difflib.get_close_matches(leaf, [str(k) for k in node.keys()], n=3, cutoff=0.6)
    return f" (did you mean {' / '.join(f'{parent}.{c}' if parent else c for c in close)}?)" if close else ""


def _unique(findings: list[Finding]) -> list[Finding]:
    """validate_config converts the actor too: one failure must not be reported twice."""
    seen, out = set(), []
    for f in findings:
        text = f.message.split(": ", 1)[-1]
        if text not in seen:
            seen.add(text)
            out.append(f)
    return out


def _blame(message: str, lines: tuple[str, ...]) -> str | None:
    """The override whose key's last part verl's message names (e.g. 'Invalid loss_agg_mode: ...')."""
    named = [x for x in lines if (leaf := x.split("=", 1)[0].rsplit(".", 1)[-1]) and leaf in message]
    return max(named, key=lambda x: len(x.split("=", 1)[0].rsplit(".", 1)[-1]), default=None)


def _message(exc: BaseException) -> str:
    """Hydra wraps the useful part ('Value ... could not be converted') in the exception's cause."""
    parts = [str(exc).strip() or type(exc).__name__]
    cause = exc.__cause__
    while cause is not None:
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        if text and text not in parts[-1]:
            parts.append(text)
        cause = cause.__cause__
    return " | ".join(p.replace("\n", " ") for p in parts)


# verl's accelerator probe, run when its trainer modules are imported: validation runs where the jobs' GPUs
# are not (a login node, a laptop), so its "No supported accelerator detected ... Falling back to 'nvidia'"
# is expected there, and nvidia is what the GPU job gets
VERL_PLATFORM_LOGGER = "verl.plugin.platform.platform_manager"


@contextlib.contextmanager
def _quiet():
    """verl prints banners and warnings while validating; keep the CLI's output clean."""
    platform_log = logging.getLogger(VERL_PLATFORM_LOGGER)  # a filter: the module sets its level on import
    platform_log.addFilter(_errors_only)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        platform_log.removeFilter(_errors_only)


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def _verl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return "?"
