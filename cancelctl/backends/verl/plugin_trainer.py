"""`verl.plugins` entry point (pyproject.toml): registers cancelctl's V1 trainer in every process that
imports verl, so the TaskRunner's `get_trainer_cls("cancelctl")` finds it (verl 0.9.1 `main_ppo.py:141`).

verl logs a plugin that fails to import only at DEBUG (`verl/__init__.py:73-76`); this module says
why at WARNING instead, and a run that asked for the trainer then stops at verl's own "Unknown
trainer 'cancelctl'" error rather than training with the wrong batch order.
"""

import logging

try:
    # the trainer's imports resolve verl's platform: the `cpu` one must be registered before (cpu/plugin.py)
    from cancelctl.backends.verl.cpu import platform as _cpu_platform

    del _cpu_platform  # imported for its registration only
    from cancelctl.backends.verl import trainer as _trainer  # noqa: F401  (registers "cancelctl")
except Exception as exc:  # noqa: BLE001 - a plugin must not break `import verl` for other runs
    logging.getLogger(__name__).warning(
        "cancelctl's verl trainer (trainer.v1.trainer_mode=cancelctl) is unavailable: %s", exc
    )
