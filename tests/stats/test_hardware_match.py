"""Arms of one comparison group on different hardware are a violation, like unmatched compute."""

from __future__ import annotations

import pandas as pd

from cancelctl.stats.hardware_match import check_hardware_matched, hardware_note

A100_40, A100_80 = "4× NVIDIA A100-SXM4-40GB (40960 MiB)", "4× NVIDIA A100-SXM4-80GB (81920 MiB)"


def runs(rows):
    return pd.DataFrame(rows, columns=["run_id", "group", "arm", "hardware_gpu", "hardware_cpu_kernels"])


def test_arms_on_one_gpu_kind_match_and_the_note_says_what_they_ran_on():
    frame = runs([(f"r{i}", "g", arm, A100_80, "AVX512 avx2") for i, arm in enumerate(["grpo", "gspo", "grpo", "gspo"])])
    assert check_hardware_matched(frame) == []
    assert hardware_note(frame) == f"ran on: {A100_80} (all 4 runs with a record)"


def test_a_40_gb_arm_beside_an_80_gb_arm_is_a_violation_naming_both():
    frame = runs([("a", "g", "grpo", A100_80, "AVX512"), ("b", "g", "gspo", A100_40, "AVX512"),
                  ("c", "h", "grpo", A100_40, ""), ("d", "h", "gspo", A100_40, "")])
    (violation,) = check_hardware_matched(frame)
    assert violation.group == "g" and violation.field == "hardware"
    assert violation.values == {"grpo": A100_80, "gspo": A100_40}
    assert hardware_note(frame) == f"ran on: {A100_40} (3 runs); {A100_80} (1 run)"


def test_cpu_runs_compare_their_kernels_and_runs_without_a_record_are_not_judged():
    amx = "AVX512 avx2 avx512f avx512_bf16 amx_bf16 amx_tile"
    frame = runs([("a", "g", "grpo", "", "AVX2 avx2"), ("b", "g", "gspo", None, amx),
                  ("c", "h", "grpo", None, None), ("d", "h", "gspo", "", "AVX2 avx2")])
    (violation,) = check_hardware_matched(frame)
    assert violation.group == "g" and violation.values == {"grpo": "AVX2 avx2", "gspo": amx}
    assert check_hardware_matched(frame.drop(columns=["hardware_gpu", "hardware_cpu_kernels"])) == []
    assert hardware_note(frame.drop(columns=["hardware_gpu", "hardware_cpu_kernels"])) is None
