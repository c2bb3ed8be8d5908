"""A CPU runtime for verl 0.9.1: `python -m verl.trainer.main_ppo` end to end without a GPU.

One module per job, all loaded by cancelctl's `verl.plugins` entry point (plugin.py):

- platform.py: the `cpu` platform (verl's `PlatformRegistry`), selected by VERL_PLATFORM=cpu; it makes
  each training worker's process group (process_group.py) at the moment verl would;
- generator.py: batched generation on Hugging Face transformers (sampling, log-probs, stop tokens);
- rollout.py: the `hf_cpu` rollout backend: a `RolloutReplica`, its Ray server actor around the
  generator, and the worker-side `BaseRollout` adapter that ships the trainer's weights;
- process_group.py: the workaround for `utils/distributed.py:89` ("cpu:gloo,cpu:gloo"): a gloo group
  whose rendezvous never listens on the port verl picked and released;
- overrides.py: the env vars and Hydra overrides a CPU run needs (data);
- render.py: which of them a `cluster.device: cpu` run renders, and which rollout (hf_cpu or verl's vLLM).

Nothing here is selected on a GPU run: registering a platform and a rollout name changes nothing
until VERL_PLATFORM=cpu / `actor_rollout_ref.rollout.name=hf_cpu` ask for them.
"""

PLATFORM_NAME = "cpu"
ROLLOUT_NAME = "hf_cpu"
# file the hf_cpu rollout appends one JSON line to per weight sync (cancelctl sets it per run)
WEIGHT_LOG_ENV = "CANCELCTL_HF_CPU_WEIGHT_LOG"
