"""The CPU process group: made by the `cpu` platform inside verl's own init, and its rendezvous never
listens on verl's MASTER_PORT pick.

verl picks MASTER_PORT by binding port 0 and closing the socket; another process may take the port
before the workers start (CI saw `EADDRINUSE`). Each test holds that port open in a listening socket
of its own first, so the old rendezvous (env://, rank 0 listening on MASTER_PORT) fails here. Both run
in fresh processes: a process has one default group. The two-rank test uses a real local Ray (bound to
127.0.0.1) and calls verl's `initialize_global_process_group_ray` as verl's TrainingWorker does, on the
`cpu` platform: without the platform's hook that raises "Duplicate device type cpu".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("ray")

pytestmark = pytest.mark.verl


@pytest.fixture
def taken_port():
    """A loopback port some other process is listening on (what the race leaves behind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_python(code: str, env: dict[str, str], timeout: int) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                            "DIST_INIT_METHOD", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**clean, **env},
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_one_rank_makes_its_group_although_the_picked_port_is_taken(taken_port):
    out = run_python("""
        import torch, torch.distributed as dist
        import cancelctl.backends.verl.cpu.process_group as pg
        assert pg.init_gloo_process_group() is True and dist.get_backend() == "gloo"
        assert pg.init_gloo_process_group() is False  # a second call leaves the group alone
        t = torch.ones(3); dist.all_reduce(t); print(int(t.sum()), dist.get_world_size())
    """, {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(taken_port)}, 120)
    assert out.split() == ["3", "1"]


def test_importing_it_does_nothing(taken_port):
    """A config that still names it as `actor_rollout_ref.model.external_lib` (as configs once did) runs:
    the import makes no group, the platform makes it later; without the variables the call does nothing."""
    out = run_python("""
        import os, torch.distributed as dist
        import cancelctl.backends.verl.cpu.process_group as pg
        print(dist.is_initialized())
        del os.environ["RANK"]
        print(pg.init_gloo_process_group(), dist.is_initialized())
    """, {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(taken_port)}, 120)
    assert out.split() == ["False", "False", "False"]


def test_two_ray_workers_meet_on_the_port_rank_0_published(taken_port):
    out = run_python(f"""
        import ray
        ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)

        @ray.remote(num_cpus=1)
        class Rank:
            def join(self):
                import torch, torch.distributed as dist
                from verl.utils.distributed import initialize_global_process_group_ray
                initialize_global_process_group_ray(timeout_second=None)  # as verl's TrainingWorker calls it
                t = torch.tensor([float(dist.get_rank() + 1)]); dist.all_reduce(t)
                return dist.get_rank(), dist.get_world_size(), float(t), dist.get_backend()

        env = {{"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{taken_port}", "WG_PREFIX": "tst",
               "VERL_PLATFORM": "cpu"}}
        ranks = [Rank.options(runtime_env={{"env_vars": {{**env, "RANK": str(r)}}}}).remote() for r in (1, 0)]
        print(sorted(ray.get([r.join.remote() for r in ranks], timeout=240)))
        ray.shutdown()
    """, {}, 300)
    assert "[(0, 2, 3.0, 'gloo'), (1, 2, 3.0, 'gloo')]" in out
