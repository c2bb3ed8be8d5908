"""Workaround for verl 0.9.1 `utils/distributed.py:89` on the `cpu` platform: create the process group first.

`TrainingWorker.__init__` (`workers/engine_workers.py:89`) calls `initialize_global_process_group_ray()`,
whose backend string is `f"cpu:gloo,{device}:{backend}"` = `"cpu:gloo,cpu:gloo"` on CPU, which torch
rejects (`ValueError: Duplicate device type cpu`). That function skips initialisation when a group
already exists (`distributed.py:90`), so this module creates a plain gloo group first.

Loaded through `actor_rollout_ref.model.external_lib=cancelctl.backends.verl.cpu.process_group`
(cpu/overrides.py), an official hook: `HFModelConfig.__post_init__` imports it
(`workers/config/model.py:149`) inside `init_model` (`engine_workers.py:541`), after verl's
`Worker` has set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and before the TrainingWorker (`:644`).
Why not from the `verl.plugins` entry point: the plugin runs at `import verl`, before a Ray worker
knows its rendezvous address (rank 0 picks MASTER_PORT at run time), and it would block every
importing process on a rendezvous. The hook is also where the model config — and so the run — asks
for it: GPU runs never import this module. Elsewhere (driver, TaskRunner, where HFModelConfig is
built without those variables) importing it does nothing. The upstream fix is one line: drop the
second pair of the backend string when the device is `cpu`.
"""

from __future__ import annotations

import os

RENDEZVOUS_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init_gloo_process_group() -> bool:
    """Create the default gloo group from the torch.distributed env vars; True if this call made it."""
    import torch.distributed as dist

    if dist.is_initialized() or not all(
        os.environ.get(name) for name in RENDEZVOUS_VARS
    ):
        return False
    dist.init_process_group(
        backend="gloo",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        init_method=os.environ.get("DIST_INIT_METHOD") or None,
    )
    return True


init_gloo_process_group()
