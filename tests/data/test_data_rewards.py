"""The rewards verl calls: math-verify on right and wrong answers (equivalent forms a string match gets
wrong included), reasoning-gym's own score_answer, the dispatch on data_source, and never None."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import math
import threading

import pytest

from cancelctl.data import UnknownDataSource, catalog, compute_score, known_data_sources, reward_for, reward_function_path
from cancelctl.data.inventory import GYM_SCORE_ANSWER, GYM_SCORE_NUMBER, MATH_VERIFY, entry_for_data_source
from cancelctl.data.rewards import VERIFIERS

needs_math_verify = pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify not installed")
needs_gym = pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym not installed")

MATH = "HuggingFaceH4/MATH-500"


def _antlr_version() -> str:
    try:
        return importlib.metadata.version("antlr4-python3-runtime")
    except importlib.metadata.PackageNotFoundError:
        return ""


ANTLR_4_9 = _antlr_version().startswith("4.9")

# (response, ground truth): equal as mathematics, unequal as strings.
EQUIVALENT = [
    ("So the answer is $\\boxed{\\frac{1}{2}}$.", "0.5"),
    ("So the answer is $\\boxed{0.5}$.", "\\frac{1}{2}"),
    ("Hence $\\boxed{\\sqrt{4}}$.", "2"),
    ("The final answer is $\\boxed{\\dfrac{3}{4}}$", "\\frac34"),
    ("She has $\\boxed{1,000}$ apples.", "1000"),
    ("$\\boxed{x^2+2x+1}$", "(x+1)^2"),
    pytest.param(
        "$\\boxed{50\\%}$",
        "\\frac{1}{2}",
        # verl pins antlr4 4.9.x (through omegaconf), and latex2sympy2_extended 1.11's parser for that
        # runtime lacks the atom rules its visitor calls: percent falls back to a string there.
        marks=pytest.mark.xfail(ANTLR_4_9, reason="latex2sympy2_extended 1.11 cannot read \\% with antlr4 4.9.x", strict=True),
    ),
    ("$\\boxed{3}$", "3.0"),
    ("$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$", "(3,\\frac{\\pi}{2})"),
]
WRONG = [
    ("So the answer is $\\boxed{\\frac{1}{3}}$.", "0.5"),
    ("$\\boxed{-2}$", "2"),
    ("I first thought 5, but it is $\\boxed{4}$.", "5"),  # the boxed answer counts, not any number
    ("$\\boxed{x^2+1}$", "(x+1)^2"),
]
UNREADABLE = ["", "no answer here", "\\boxed{", "$\\boxed{}$", "}}}{{{\\frac", "\\boxed{\\frac{1}{0}}" * 3]


def string_match(response: str, truth: str) -> bool:
    return response.split("\\boxed{")[-1].rsplit("}", 1)[0].strip("$ .") == truth


@needs_math_verify
@pytest.mark.parametrize(("response", "truth"), EQUIVALENT)
def test_equivalent_forms_score_one_where_a_string_match_fails(response, truth):
    assert not string_match(response, truth)
    assert compute_score(MATH, response, truth) == 1.0


@needs_math_verify
@pytest.mark.parametrize(("response", "truth"), WRONG)
def test_wrong_answers_score_zero(response, truth):
    assert compute_score(MATH, response, truth) == 0.0


@needs_math_verify
def test_dapo_answer_line_and_gsm8k_numbers():
    dapo = "BytedTsinghua-SIA/DAPO-Math-17k"
    assert compute_score(dapo, "Adding up ...\nAnswer: 34", "34") == 1.0
    assert compute_score(dapo, "Adding up ...\nAnswer: 35", "34") == 0.0
    assert compute_score("openai/gsm8k", "48/2 = 24, 48+24 = 72. \\boxed{72}", "72") == 1.0
    assert compute_score("openai/gsm8k", "<think>maybe 70</think> \\boxed{72}", "70") == 0.0


@needs_math_verify
@pytest.mark.parametrize("response", UNREADABLE)
def test_an_unreadable_answer_scores_zero_not_none(response):
    score = compute_score(MATH, response, "3")
    assert isinstance(score, float) and score == 0.0


@needs_math_verify
def test_a_worker_thread_scores_as_the_main_thread_does():
    """verl's reward loop calls a synchronous reward in an executor thread, where math-verify's
    signal-based timeout cannot run; the reward must still read answers there."""
    scores = []
    worker = threading.Thread(
        target=lambda: scores.extend(
            [compute_score(MATH, "$\\boxed{\\frac{1}{2}}$", "0.5"), compute_score(MATH, "$\\boxed{\\frac{1}{3}}$", "0.5")]
        )
    )
    worker.start()
    worker.join()
    assert scores == [1.0, 0.0]


@needs_math_verify
def test_verl_call_shape_is_accepted():
    """verl passes keywords, extra_info with its own additions, and (with a reward router) more keywords."""
    extra_info = {"split": "test", "index": 0, "num_turns": None, "rollout_reward_scores": {}}
    assert compute_score(data_source=MATH, solution_str="\\boxed{2}", ground_truth="2", extra_info=extra_info) == 1.0
    assert compute_score(MATH, "\\boxed{2}", "2", extra_info, reward_router_address=None, reward_model_tokenizer=None) == 1.0


@needs_gym
def test_reasoning_gym_score_answer_right_and_wrong(tmp_path):
    import pyarrow.parquet as pq

    from cancelctl.data import prepare

    (prepared,) = prepare(["chain_sum"], tmp_path, seed=5, size=10)
    row = pq.read_table(prepared.files["train"]).to_pylist()[0]
    truth, info = row["reward_model"]["ground_truth"], row["extra_info"]
    wrong = str(int(truth) + 1)
    assert compute_score(row["data_source"], f"Adding step by step. <answer>{truth}</answer>", truth, info) == 1.0
    assert compute_score(row["data_source"], f"<answer>{wrong}</answer>", truth, info) == 0.0
    assert compute_score(row["data_source"], truth, truth, info) == 0.0  # no tags: not the asked format
    # without extra_info (a file from elsewhere) the ground truth stands in for the item
    assert compute_score(row["data_source"], f"<answer>{truth}</answer>", truth, None) == 1.0


@needs_gym
def test_reasoning_gym_uses_the_dataset_own_scorer():
    """gsm_symbolic's scorer gives a wrong number 0.01 (its own choice), reads the number out of the answer."""
    item = {"question": "How many?", "answer": "70", "metadata": {"source_dataset": "gsm_symbolic"}}
    info = {"entry": json.dumps(item)}
    assert compute_score("reasoning_gym/gsm_symbolic", "<answer>70 students</answer>", "70", info) == 1.0
    assert compute_score("reasoning_gym/gsm_symbolic", "<answer>71</answer>", "70", info) == 0.01
    assert compute_score("reasoning_gym/gsm_symbolic", "<answer>seventy</answer>", "70", info) == 0.0


@needs_gym
def test_any_reasoning_gym_task_has_a_reward_unknown_ones_do_not():
    assert reward_for("reasoning_gym/leg_counting") is VERIFIERS[GYM_SCORE_ANSWER]
    with pytest.raises(UnknownDataSource, match="no reward for data_source 'reasoning_gym/no_such_task'"):
        reward_for("reasoning_gym/no_such_task")


@pytest.mark.parametrize("data_source", [e.data_source for e in catalog()])
@pytest.mark.parametrize(
    "response",
    [None, "", "garbage \\boxed{", "<answer></answer>", "<answer>\\frac{</answer>", "x" * 20000],
    ids=["none", "empty", "open-boxed", "empty-tags", "open-frac", "long"],
)
def test_never_none_for_any_catalog_data_source(data_source, response):
    pytest.importorskip({MATH_VERIFY: "math_verify", GYM_SCORE_ANSWER: "reasoning_gym", GYM_SCORE_NUMBER: "reasoning_gym"}[entry_for_data_source(data_source).verifier])
    score = compute_score(data_source, response, "7", {"entry": "not json"})
    assert isinstance(score, float) and not math.isnan(score) and 0.0 <= score <= 1.0


def test_every_catalog_data_source_has_its_verifier():
    assert {e.verifier for e in catalog()} <= set(VERIFIERS)
    assert known_data_sources() == tuple(sorted(e.data_source for e in catalog()))
    for e in catalog():
        assert reward_for(e.data_source) is VERIFIERS[e.verifier]
    assert reward_for(MATH) is VERIFIERS[MATH_VERIFY]


def test_an_unknown_data_source_is_loud():
    with pytest.raises(UnknownDataSource, match="no reward for data_source 'lighteval/MATH'; known: BytedTsinghua"):
        compute_score("lighteval/MATH", "\\boxed{1}", "1")


@needs_math_verify
def test_verl_loads_the_reward_by_package():
    """verl's load_module for a `pkg://` path: importlib.import_module of the dotted name."""
    from cancelctl.data.rewards import REWARD_FUNCTION, REWARD_MODULE

    module = importlib.import_module(REWARD_MODULE.removeprefix("pkg://").replace("/", "."))
    assert getattr(module, REWARD_FUNCTION)(MATH, "\\boxed{\\sqrt{4}}", "2") == 1.0


@needs_math_verify
def test_verl_loads_the_reward_by_file_path():
    """What verl's load_extern_object does with `reward.custom_reward_function.path`: a module from a
    file, under a name of its own."""
    path, name = reward_function_path().rsplit(":", 1)
    assert path.endswith("cancelctl/data/rewards.py") and name == "compute_score"
    spec = importlib.util.spec_from_file_location("custom_module_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert getattr(module, name)(MATH, "\\boxed{\\sqrt{4}}", "2") == 1.0
