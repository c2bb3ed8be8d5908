"""Fixtures for cancelctl.data: no test reaches the network. `datasets.load_dataset` is replaced for
every test (a call without a fixture fails), and `hub` serves local `Dataset.from_dict` tables,
shaped as each dataset's card documents, to the real download path."""

from __future__ import annotations

import importlib.util

import pytest

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def dapo_record(problem: str, answer: str, uuid: str) -> dict:
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": DAPO_TEMPLATE.format(problem), "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": uuid},
    }


def _columns(records: list[dict]) -> dict[str, list]:
    return {key: [r[key] for r in records] for key in records[0]}


# (hub id, source split) -> records, as the cards list the columns.
HUB_RECORDS = {
    ("BytedTsinghua-SIA/DAPO-Math-17k", "train"): [
        dapo_record("Find $1+1$.", "2", "a1"),
        dapo_record("Find $1+1$.", "2", "a1"),  # the Hub split repeats each prompt
        dapo_record("Find $2+3$.", "5", "b2"),
        dapo_record("Find $1+1$.", "2", "a1"),
    ],
    ("HuggingFaceH4/MATH-500", "test"): [
        {
            "problem": "What is $\\frac{1}{2}+\\frac{1}{4}$?",
            "solution": "... $\\boxed{\\frac{3}{4}}$",
            "answer": "\\frac{3}{4}",
            "subject": "Prealgebra",
            "level": 2,
            "unique_id": "test/prealgebra/1.json",
        },
        {
            "problem": "Convert $(0,3)$ to polar coordinates.",
            "solution": "... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        },
    ],
    ("HuggingFaceH4/aime_2024", "train"): [
        {
            "id": 60,
            "problem": "Every morning Aya goes for a 9-kilometer-long walk ...",
            "solution": "... $\\boxed{204}$",
            "answer": "204",
            "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
            "year": "2024",
        }
    ],
    ("math-ai/aime25", "test"): [
        {"problem": "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b$.", "answer": "70", "id": "0"}
    ],
    ("math-ai/amc23", "test"): [
        {"id": 0, "question": "How many positive perfect squares less than 2023 are divisible by 5?", "answer": 8.0, "url": "u0"},
        {"id": 1, "question": "What is the area?", "answer": 0.5, "url": "u1"},
    ],
    # Hothan/OlympiadBench, config OE_TO_maths_en_COMP: final_answer is a list of LaTeX strings
    ("Hothan/OlympiadBench", "train"): [
        {
            "id": 1606,
            "question": "Let $T=8$. Compute the number of positive divisors of $T^2$.",
            "solution": ["... so the answer is $3 \\cdot 3 \\cdot ... $"],
            "final_answer": ["$7$"],
            "context": None,
            "modality": "Text-only",
            "difficulty": "Competition",
            "is_multiple_answer": False,
            "unit": None,
            "answer_type": "Numerical",
            "error": None,
            "question_type": "Open-ended",
            "subfield": "Number Theory",
            "subject": "Math",
            "language": "English",
        },
        {
            "id": 1607,
            "question": "Find all real $x$ with $x^2=4$.",
            "solution": ["..."],
            "final_answer": ["$-2$", "$2$"],
            "context": None,
            "modality": "Text-only",
            "difficulty": "Competition",
            "is_multiple_answer": True,
            "unit": None,
            "answer_type": "Numerical",
            "error": None,
            "question_type": "Open-ended",
            "subfield": "Algebra",
            "subject": "Math",
            "language": "English",
        },
    ],
    ("openai/gsm8k", "train"): [
        {"question": "Natalia sold clips to 48 of her friends in April, and half as many in May. How many in all?", "answer": "48/2 = 24\n48+24 = 72\n#### 72"},
        {"question": "A farm has 1,200 hens and buys 300 more. How many hens?", "answer": "1200+300=1500\n#### 1,500"},
    ],
    ("openai/gsm8k", "test"): [
        {"question": "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4. She sells the rest for $2. How much?", "answer": "16-3-4=9\n9*2=18\n#### 18"}
    ],
}


class NetworkInTests(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test: the Hub is offline and `datasets.load_dataset` refuses to run unless `hub` serves it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    if importlib.util.find_spec("datasets") is None:
        return

    import datasets

    def refuse(*args, **kwargs):
        raise NetworkInTests(f"datasets.load_dataset{args} called in a test without the hub fixture")

    monkeypatch.setattr(datasets, "load_dataset", refuse)


@pytest.fixture
def hub(monkeypatch):
    """The download path served from local `datasets.Dataset.from_dict` tables; records every call.

    `hub.records` maps (hub id, split) -> records: edit it before a call to change what is served;
    `hub.calls` lists the (hub id, config, split) loaded.
    """
    datasets = pytest.importorskip("datasets")

    class FakeHub:
        def __init__(self):
            self.records = {key: [dict(r) for r in rows] for key, rows in HUB_RECORDS.items()}
            self.calls: list[tuple] = []

        def load_dataset(self, path, name=None, *, split=None, **kwargs):
            self.calls.append((path, name, split))
            return datasets.Dataset.from_dict(_columns(self.records[(path, split)]))

    fake = FakeHub()
    monkeypatch.setattr(datasets, "load_dataset", fake.load_dataset)
    return fake
