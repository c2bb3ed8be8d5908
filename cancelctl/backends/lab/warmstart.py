"""Warm start: a short supervised phase on a noisy synthetic corpus, cached on disk.

The corpus mixes correct answers in every surface form with wrong ones (a `noise` share: near
misses a+b±1, ±2, ±10, or any number), so the start policy solves a fair share of prompts yet keeps
real entropy over answers and forms — the regime where RLVR's group advantages carry signal.

The cache holds one state dict per (task config, model config, warm-start config, seed). Runs that
start together take an exclusive file lock on the key, so one trains and the others wait and load;
the file is written to a temp name and `os.replace`d, so a reader never sees half a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cancelctl.backends.lab.checkpoint import save_replacing
from cancelctl.backends.lab.policy import PolicyConfig, TinyCausalLM, response_forward
from cancelctl.backends.lab.rollout import prompt_block
from cancelctl.backends.lab.task import FORM_WEIGHTS, PAD_ID, SURFACE_FORMS, ArithmeticTask, Problem

CACHE_VERSION = 1  # bump when the corpus or the training recipe changes: old files stop matching
BATCH_SIZE = 32
LR = 3e-3


@dataclass(frozen=True)
class WarmStartConfig:
    steps: int
    noise: float
    seed: int


def cache_key(task: ArithmeticTask, policy: PolicyConfig, warm: WarmStartConfig) -> str:
    blob = json.dumps(
        {
            "v": CACHE_VERSION,
            "max_operand": task.max_operand,
            "policy": _policy_key(policy),
            "warm": asdict(warm),
            "recipe": {"batch_size": BATCH_SIZE, "lr": LR},
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _policy_key(policy: PolicyConfig) -> dict:
    """The policy config as keyed; a dense policy omits the MoE fields, so caches made before MoE existed
    still match."""
    fields = asdict(policy)
    if not policy.moe_experts:
        fields.pop("moe_experts"), fields.pop("moe_top_k")
    return fields


def wrong_value(answer: int, max_sum: int, g: torch.Generator) -> int:
    """A plausible wrong answer: mostly near misses, sometimes any number in range."""
    u = torch.rand((), generator=g).item()
    if u < 0.6:
        value = answer + [-2, -1, 1, 2][int(torch.randint(4, (), generator=g))]
    elif u < 0.8:
        value = answer + (10 if torch.rand((), generator=g).item() < 0.5 else -10)
    else:
        value = int(torch.randint(max_sum + 1, (), generator=g))
    return value if value >= 0 and value != answer else answer + 1


def corpus_batch(task: ArithmeticTask, n: int, noise: float, g: torch.Generator):
    """n corpus sequences laid out like rollouts (responses padded to the longest): ids, valid, target mask."""
    pairs = torch.randint(len(task.all_pairs), (n,), generator=g).tolist()
    templates = torch.randint(3, (n,), generator=g).tolist()
    forms = torch.multinomial(torch.tensor(FORM_WEIGHTS), n, replacement=True, generator=g).tolist()
    wrong = (torch.rand(n, generator=g) < noise).tolist()
    problems, answers = [], []
    for pair, template, form, is_wrong in zip(pairs, templates, forms, wrong, strict=True):
        p = Problem(*task.all_pairs[pair], template)
        value = wrong_value(p.answer, task.max_sum, g) if is_wrong else p.answer
        problems.append(p)
        answers.append(task.answer_ids(p, value, SURFACE_FORMS[form]))
    response = torch.full((n, max(map(len, answers))), PAD_ID, dtype=torch.long)
    for i, a in enumerate(answers):
        response[i, : len(a)] = torch.tensor(a)
    ids = torch.cat([prompt_block(task, problems, task.max_prompt_len), response], dim=1)
    valid = ids != PAD_ID
    return ids, valid, valid[:, task.max_prompt_len :].float()


def train_warm_start(task: ArithmeticTask, policy: PolicyConfig, warm: WarmStartConfig) -> TinyCausalLM:
    torch.manual_seed(warm.seed)
    model = TinyCausalLM(policy)
    g = torch.Generator().manual_seed(warm.seed + 7919)  # corpus stream, separate from init
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / max(warm.steps, 1))
    for _ in range(warm.steps):
        ids, valid, mask = corpus_batch(task, BATCH_SIZE, warm.noise, g)
        out = response_forward(model, ids, valid, task.max_prompt_len)
        loss = -(out.log_prob * mask).sum() / mask.sum()  # next-token NLL on the response only
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    return model


@contextmanager
def _locked(path: Path):
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_or_train(task: ArithmeticTask, policy: PolicyConfig, warm: WarmStartConfig, cache_dir: Path) -> TinyCausalLM:
    """The warm-started policy for this key: from the cache, or trained once and cached."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = cache_key(task, policy, warm)
    target = cache_dir / f"lab-warmstart-{key}.pt"
    with _locked(cache_dir / f"lab-warmstart-{key}.lock"):
        if not target.exists():
            model = train_warm_start(task, policy, warm)
            # a full disk is the OS's error naming the file, not torch's "unexpected pos"
            save_replacing({"policy": asdict(policy), "warm": asdict(warm), "state_dict": model.state_dict()}, target)
            return model
    blob = torch.load(target, map_location="cpu", weights_only=True)
    model = TinyCausalLM(policy)
    model.load_state_dict(blob["state_dict"])
    return model
