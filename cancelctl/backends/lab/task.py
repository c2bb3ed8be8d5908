"""The lab's verifiable task: small-number addition with answers in several equivalent surface forms.

A prompt is "what is 1 2 + 7 ?" (digits are single tokens); a response is the shared template
"the answer is" followed by one surface form of the sum, then <eos>:

    digits    the answer is 1 9
    padded    the answer is 0 1 9          (zero-padded to one digit more than the largest sum)
    words     the answer is nineteen
    equation  the answer is 1 2 + 7 = 1 9

The checker gives a sparse 0/1 reward: 1 iff the response starts with the template, ends with
<eos>, and the value it states (after the last "=" for the equation form) equals a + b — every
surface form of the right number is equally correct, which is what [D App. A.3]'s drift between
equivalent correct answers needs. Everything is generated from the run's seed; nothing is downloaded.

Split: (a, b) pairs are partitioned by the seed into RL-training and held-out eval pairs, so an eval
prompt never appears in RL training under any template. The warm-start corpus ("pretraining",
warmstart.py) covers all pairs, as a pretrained LM has seen arithmetic that RL prompts never ask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
DIGITS = [str(d) for d in range(10)]
UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
SCALES = ["hundred", "thousand"]
PROMPT_WORDS = ["what", "compute", "plus", "+", "=", "?", "."]
TEMPLATE = ["the", "answer", "is"]  # shared by every response: the "reward-unrelated" tokens of [D §3]
VOCAB: list[str] = [PAD, BOS, EOS, *DIGITS, *UNITS, *TENS, *SCALES, *PROMPT_WORDS, *TEMPLATE]
STOI = {tok: i for i, tok in enumerate(VOCAB)}
PAD_ID, BOS_ID, EOS_ID = STOI[PAD], STOI[BOS], STOI[EOS]

# Prompt templates over the same (a, b): more distinct prompts than facts.
PROMPT_TEMPLATES = (
    ("what", "is", "A", "+", "B", "?"),
    ("compute", "A", "plus", "B", "."),
    ("A", "+", "B", "=", "?"),
)
SURFACE_FORMS = ("digits", "padded", "words", "equation")
# How often the warm-start corpus writes each form: unequal, so equivalent answers start with
# different probabilities and their log-odds has room to drift either way [D App. A.3].
FORM_WEIGHTS = (0.4, 0.15, 0.25, 0.2)
EVAL_FRACTION = 0.2  # share of (a, b) pairs held out for evaluation


def number_words(n: int) -> list[str]:
    """English number words, one token per word: 37 → ["thirty", "seven"]."""
    if n < 0:
        raise ValueError(f"no words for negative {n}")
    if n < 20:
        return [UNITS[n]]
    if n < 100:
        tens, unit = divmod(n, 10)
        return [TENS[tens - 2]] + ([UNITS[unit]] if unit else [])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return [UNITS[hundreds], "hundred"] + (number_words(rest) if rest else [])
    thousands, rest = divmod(n, 1000)
    return number_words(thousands) + ["thousand"] + (number_words(rest) if rest else [])


def parse_number(tokens: list[str]) -> int | None:
    """Inverse of the digit and word forms (leading zeros allowed); None if not a number."""
    if not tokens:
        return None
    if all(t in DIGITS for t in tokens):
        return int("".join(tokens))
    if any(t not in UNITS and t not in TENS and t not in SCALES for t in tokens):
        return None
    value = _words_value(tokens)
    return value if tokens == number_words(value) else None  # one canonical spelling per number


def _words_value(tokens: list[str]) -> int:
    total, current = 0, 0
    for t in tokens:
        if t in UNITS:
            current += UNITS.index(t)
        elif t in TENS:
            current += 10 * (TENS.index(t) + 2)
        elif t == "hundred":
            current *= 100
        else:  # thousand
            total += current * 1000
            current = 0
    return total + current


@dataclass(frozen=True)
class Problem:
    a: int
    b: int
    template: int

    @property
    def answer(self) -> int:
        return self.a + self.b


class ArithmeticTask:
    """Prompts, surface forms and the 0/1 checker for operands in [0, max_operand]."""

    def __init__(self, max_operand: int, seed: int) -> None:
        self.max_operand = max_operand
        self.max_sum = 2 * max_operand
        self.pad_width = len(str(self.max_sum)) + 1
        pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
        order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed)).tolist()
        n_eval = max(1, math.ceil(EVAL_FRACTION * len(pairs)))
        eval_pairs = [pairs[i] for i in order[:n_eval]]
        train_pairs = [pairs[i] for i in order[n_eval:]]
        n_templates = len(PROMPT_TEMPLATES)
        self.train_problems = [Problem(a, b, t) for a, b in train_pairs for t in range(n_templates)]
        # eval: template-interleaved order so the first k eval prompts cover every template
        self.eval_problems = [Problem(a, b, t) for i, (a, b) in enumerate(eval_pairs) for t in [i % n_templates]]
        self.eval_problems += [
            Problem(a, b, t) for i, (a, b) in enumerate(eval_pairs) for t in range(n_templates) if t != i % n_templates
        ]
        self.all_pairs = pairs
        self.max_prompt_len = 1 + max(
            len(self.prompt_tokens(Problem(self.max_operand, self.max_operand, t))) for t in range(n_templates)
        )

    # ------------------------------------------------------------ text

    def prompt_tokens(self, p: Problem) -> list[str]:
        out: list[str] = []
        for t in PROMPT_TEMPLATES[p.template]:
            out += list(str(p.a)) if t == "A" else list(str(p.b)) if t == "B" else [t]
        return out

    def prompt_ids(self, p: Problem) -> list[int]:
        return [BOS_ID] + [STOI[t] for t in self.prompt_tokens(p)]

    def answer_tokens(self, p: Problem, value: int, form: str) -> list[str]:
        """Template + `value` written in `form` + <eos> (value need not be correct)."""
        if form == "digits":
            body = list(str(value))
        elif form == "padded":
            body = list(str(value).zfill(self.pad_width))
        elif form == "words":
            body = number_words(value)
        elif form == "equation":
            body = [*str(p.a), "+", *str(p.b), "=", *str(value)]
        else:
            raise ValueError(f"unknown surface form {form!r}; expected one of {SURFACE_FORMS}")
        return [*TEMPLATE, *body, EOS]

    def answer_ids(self, p: Problem, value: int, form: str) -> list[int]:
        return [STOI[t] for t in self.answer_tokens(p, value, form)]

    def max_answer_len(self) -> int:
        """Longest correct response (tokens incl. <eos>): the cap generation needs to finish."""
        longest_words = max(len(number_words(v)) for v in range(self.max_sum + 1))
        p = Problem(self.max_operand, self.max_operand, 0)
        return max(len(self.answer_tokens(p, self.max_sum, "equation")), len(TEMPLATE) + longest_words + 1)

    # ------------------------------------------------------------ checker

    def stated_value(self, response_ids: list[int]) -> int | None:
        """The number a response states, or None if it is malformed (no template, no <eos>)."""
        if EOS_ID not in response_ids:
            return None
        tokens = [VOCAB[i] for i in response_ids[: response_ids.index(EOS_ID)]]
        if tokens[: len(TEMPLATE)] != TEMPLATE:
            return None
        body = tokens[len(TEMPLATE) :]
        if "=" in body:
            body = body[len(body) - body[::-1].index("=") :]
        return parse_number(body)

    def reward(self, p: Problem, response_ids: list[int]) -> float:
        """Sparse 0/1 verifier reward: any surface form of the right number is correct."""
        return 1.0 if self.stated_value(response_ids) == p.answer else 0.0

    # ------------------------------------------------------------ sampling

    def sample_train(self, n: int, generator: torch.Generator) -> list[Problem]:
        """n distinct RL-training prompts (with replacement only if n exceeds the split)."""
        size = len(self.train_problems)
        idx = torch.randperm(size, generator=generator).tolist()
        while len(idx) < n:
            idx += torch.randperm(size, generator=generator).tolist()
        return [self.train_problems[i] for i in idx[:n]]

    def eval_set(self, n: int) -> list[Problem]:
        return self.eval_problems[: min(n, len(self.eval_problems))]


def decode(ids: list[int]) -> str:
    return " ".join(VOCAB[i] for i in ids if i != PAD_ID)
