import pytest

from cancelctl.backends.lab.task import (
    EOS_ID,
    STOI,
    SURFACE_FORMS,
    VOCAB,
    ArithmeticTask,
    Problem,
    number_words,
    parse_number,
)


def ids(words: str) -> list[int]:
    return [STOI[w] for w in words.split()]


def test_vocab_has_no_duplicates():
    assert len(VOCAB) == len(set(VOCAB)) == len(STOI)


def test_number_words_round_trip():
    for n in range(2000):
        assert parse_number(number_words(n)) == n
        assert parse_number(list(str(n))) == n
    assert number_words(37) == ["thirty", "seven"]
    assert number_words(1998) == ["one", "thousand", "nine", "hundred", "ninety", "eight"]


def test_parse_number_rejects_non_canonical_words():
    assert parse_number(["seven", "thirty"]) is None
    assert parse_number(["twenty", "zero"]) is None
    assert parse_number(["the"]) is None
    assert parse_number([]) is None


@pytest.mark.parametrize("form", SURFACE_FORMS)
def test_every_surface_form_of_the_right_sum_is_correct(form):
    task = ArithmeticTask(max_operand=20, seed=0)
    p = Problem(a=12, b=7, template=0)
    assert task.reward(p, task.answer_ids(p, 19, form)) == 1.0
    assert task.reward(p, task.answer_ids(p, 18, form)) == 0.0


def test_checker_examples():
    task = ArithmeticTask(max_operand=20, seed=0)
    p = Problem(a=12, b=7, template=0)
    assert task.reward(p, ids("the answer is 0 1 9 <eos>")) == 1.0
    assert task.reward(p, ids("the answer is nineteen <eos>")) == 1.0
    assert task.reward(p, ids("the answer is 1 2 + 7 = 1 9 <eos>")) == 1.0
    assert task.reward(p, ids("the answer is 1 9")) == 0.0  # no <eos>: truncated
    assert task.reward(p, ids("answer is 1 9 <eos>")) == 0.0  # template broken
    assert task.reward(p, ids("the answer is 1 9 <eos> 2")) == 1.0  # after <eos> is ignored
    assert task.reward(p, ids("the answer is <eos>")) == 0.0
    assert task.reward(p, ids("the answer is 1 nine <eos>")) == 0.0


def test_split_is_disjoint_by_fact_and_seeded():
    task = ArithmeticTask(max_operand=9, seed=3)
    train_pairs = {(p.a, p.b) for p in task.train_problems}
    eval_pairs = {(p.a, p.b) for p in task.eval_problems}
    assert not train_pairs & eval_pairs
    assert len(train_pairs | eval_pairs) == 100
    assert len(eval_pairs) == 20
    again = ArithmeticTask(max_operand=9, seed=3)
    assert again.eval_problems == task.eval_problems
    assert ArithmeticTask(max_operand=9, seed=4).eval_problems != task.eval_problems
    # the first eval prompts cycle through the templates
    assert {p.template for p in task.eval_set(3)} == {0, 1, 2}


def test_longest_answer_fits_the_cap():
    task = ArithmeticTask(max_operand=9, seed=0)
    p = Problem(9, 9, 0)
    longest = max(len(task.answer_ids(p, v, f)) for v in range(19) for f in SURFACE_FORMS)
    assert task.max_answer_len() == longest <= 16
    assert task.answer_ids(p, 18, "digits")[-1] == EOS_ID
