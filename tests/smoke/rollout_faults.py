"""Test plugin: plants a rollout–trainer disagreement in the hf_cpu rollout, for the smoke's conformance
gate to find (tests/smoke/test_smoke_conformance.py). Never part of cancelctl: a test loads it into every
verl process with VERL_USE_EXTERNAL_MODULES=rollout_faults (verl imports it at `import verl`), this
folder on PYTHONPATH.

FAULTS_ENV maps a run-name fragment to a fault, e.g. `stale-weights=stale,rollout-dtype=dtype`; a run
is recognised by its run folder, which cancelctl hands every verl process as the rollout's weight-log
path (cancelctl.backends.verl.cpu.WEIGHT_LOG_ENV). The faults, each a real-world way to break it:

- `stale`: the rollout acknowledges every weight sync but keeps the weights it loaded from disk
  (e.g. names that no longer match under `load_state_dict(strict=False)`);
- `chat_template`: the rollout sees each prompt rendered with another chat template — a default system
  turn before it, as Qwen2.5's template adds and plain ChatML does not;
- `dtype`: the rollout computes in bf16 whatever `rollout.dtype` declares.
"""

from __future__ import annotations

import os

import torch

from cancelctl.backends.verl.cpu import WEIGHT_LOG_ENV
from cancelctl.backends.verl.cpu import generator as _generator

FAULTS_ENV = "CANCELCTL_TEST_ROLLOUT_FAULTS"
SYSTEM_TURN = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


def planted_fault() -> str | None:
    """This process's fault: the first fragment of FAULTS_ENV in its run's folder."""
    where = os.environ.get(WEIGHT_LOG_ENV, "")
    for item in filter(None, os.environ.get(FAULTS_ENV, "").split(",")):
        fragment, _, fault = item.partition("=")
        if where and fragment in where:
            return fault
    return None


def _plant(fault: str) -> None:
    cls = _generator.BatchingGenerator
    init, generate = cls.__init__, cls.generate

    if fault == "stale":
        cls.load_state_dict = lambda self, state: ([], [])  # acknowledged, never loaded
    elif fault == "dtype":
        def bf16_init(self, model, **kwargs):
            init(self, model.to(torch.bfloat16), **kwargs)

        cls.__init__ = bf16_init
    elif fault == "chat_template":
        def other_template_init(self, model, **kwargs):
            from transformers import AutoTokenizer

            init(self, model, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(model.config._name_or_path)
            self.system_turn = tokenizer.encode(SYSTEM_TURN, add_special_tokens=False)

        async def other_template_generate(self, request):
            from dataclasses import replace

            return await generate(self, replace(request, prompt_ids=[*self.system_turn, *request.prompt_ids]))

        cls.__init__, cls.generate = other_template_init, other_template_generate
    else:
        raise ValueError(f"${FAULTS_ENV}: unknown fault {fault!r} (stale, chat_template, dtype)")
    print(f"rollout_faults: planted {fault!r} in the hf_cpu rollout", flush=True)


if (_fault := planted_fault()) is not None:
    _plant(_fault)
