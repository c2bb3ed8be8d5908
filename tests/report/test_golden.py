"""The report's files, byte for byte, against golden copies written before the report became a
package (tests/report/golden/, see golden_cases.py): the refactor and later edits keep every number."""

from __future__ import annotations

import pytest
from golden_cases import GOLDEN_DIR, build_case, case_options, golden_files


@pytest.mark.parametrize("case", sorted(case_options()))
def test_report_files_match_the_golden_copy(case, tmp_path):
    build_case(case, tmp_path)
    expected = [p.relative_to(GOLDEN_DIR / case) for p in golden_files(GOLDEN_DIR / case)]
    written = [p.relative_to(tmp_path) for p in golden_files(tmp_path)]
    assert written == expected
    for name in expected:
        assert (tmp_path / name).read_text() == (GOLDEN_DIR / case / name).read_text(), f"{case}: {name} differs"
