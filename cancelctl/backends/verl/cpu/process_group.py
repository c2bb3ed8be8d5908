"""The gloo process group of a verl worker on the `cpu` platform, made before verl's own init.

`TrainingWorker.__init__` (`workers/engine_workers.py:89`) calls `initialize_global_process_group_ray()`,
whose backend string is `f"cpu:gloo,{device}:{backend}"` = `"cpu:gloo,cpu:gloo"` on CPU, which torch
rejects (`ValueError: Duplicate device type cpu`). That function skips initialisation when a group
already exists (`distributed.py:90`), so `init_gloo_process_group` creates a plain gloo group first.

Called by the `cpu` platform's `communication_backend_name()` (cpu/platform.py), which verl calls while
building that string: in the worker, after verl's `Worker` has set RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT, just before `init_process_group` — so every CPU run gets its group, plain main_ppo
commands included, with nothing in the run's config. (It used to be imported through
`actor_rollout_ref.model.external_lib`; importing this module now does nothing, so such a config
still runs.) Why not at `import verl` (the `verl.plugins` entry point): a Ray worker does not know its
rendezvous address yet (rank 0 picks MASTER_PORT at run time), and it would block every importing
process on a rendezvous. Without those variables (driver, TaskRunner) `init_gloo_process_group` does
nothing. The upstream fix is one line: drop the second pair of the backend string when the device is
`cpu`.

Why rank 0 does not listen on MASTER_PORT: verl picks it by binding port 0 and closing the socket
(`single_controller/ray/base.py:91`), seconds before the workers bind it — long enough, with other
runs starting on the same machine, for another process to take it (CI saw `EADDRINUSE` once with
three runs side by side). So rank 0's store binds a port the kernel holds for it from the start,
and the other ranks read that port from Ray's key-value store, under a key unique to this worker
group (verl's WG_PREFIX and pick). A `DIST_INIT_METHOD` set by the user is honoured as verl does.
"""

from __future__ import annotations

import os
import time

RENDEZVOUS_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
STORE_PORT_WAIT_S = 600  # how long ranks > 0 wait for rank 0 to publish its store's port


def _store_port_key() -> str:
    """Unique to this worker group while it starts: its random prefix and verl's (unused) pick."""
    env = os.environ
    return f"cancelctl/process_group/{env.get('WG_PREFIX', '')}/{env['MASTER_ADDR']}:{env['MASTER_PORT']}"


def publish_store_port(port: int) -> None:
    from ray.experimental import internal_kv

    internal_kv._internal_kv_put(_store_port_key(), str(port))


def wait_for_store_port(timeout_s: float = STORE_PORT_WAIT_S) -> int:
    from ray.experimental import internal_kv

    key, deadline = _store_port_key(), time.monotonic() + timeout_s
    while (port := internal_kv._internal_kv_get(key)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 of this worker group did not publish its store's port within "
                               f"{timeout_s:.0f} s (Ray key {key!r}); see rank 0's log")
        time.sleep(0.1)
    return int(port)


def rendezvous_store(rank: int, world_size: int):
    """Rank 0's TCPStore on a port the kernel picks and keeps bound; the others connect to it."""
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout  # the store timeout env:// gave

    if rank == 0:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], 0, world_size, is_master=True,
                              timeout=default_pg_timeout, wait_for_workers=False)
        if world_size > 1:
            publish_store_port(store.port)
        return store
    return dist.TCPStore(os.environ["MASTER_ADDR"], wait_for_store_port(), world_size, is_master=False,
                         timeout=default_pg_timeout)


def init_gloo_process_group() -> bool:
    """Create the default gloo group of this Ray worker; True if this call made it."""
    import torch.distributed as dist

    if dist.is_initialized() or not all(
        os.environ.get(name) for name in RENDEZVOUS_VARS
    ):
        return False
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if init_method := os.environ.get("DIST_INIT_METHOD"):
        dist.init_process_group(backend="gloo", rank=rank, world_size=world_size, init_method=init_method)
    else:
        dist.init_process_group(backend="gloo", rank=rank, world_size=world_size,
                                store=rendezvous_store(rank, world_size))
    return True
