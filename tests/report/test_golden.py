"""The report's files against golden copies written before the report became a package
(tests/report/golden/, see golden_cases.py): the refactor and later edits keep every number.

Text is compared byte for byte; a CSV cell that differs is accepted only when both cells are numbers
equal to 12 significant digits: numpy's sums take other SIMD paths on other CPUs and move the last
bit or two of a float64 (seen: jitter2.csv on an EPYC, ...147 vs ...146e-2), which says nothing about
the report.

The compute-scaling tables (`compute_scaling*`) hold least-squares fits: where the optimizer stops
depends on its iterations, and a last-bit difference in its input can move the stop by ~1e-8
relative (measured: 1.2e-8 between two tolerances), so their numbers — CSV and JSON — are compared to
FIT_REL_TOL; what people read (report.md, .html: 3 significant digits) stays byte for byte."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from golden_cases import GOLDEN_DIR, build_case, case_options, golden_files

REL_TOL = 1e-12  # a few ulps of float64 (2.2e-16) across a reduction of a few hundred terms
FIT_REL_TOL = 1e-6  # a least-squares fit's numbers (see the module docstring)


def same_cell(got: str, want: str, rel_tol: float = REL_TOL) -> bool:
    if got == want:
        return True
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-15)


def json_differences(got: object, want: object, rel_tol: float, where: str = "") -> list[str]:
    """Where two parsed JSON documents differ, numbers compared to `rel_tol`."""
    if isinstance(got, dict) and isinstance(want, dict):
        if list(got) != list(want):
            return [f"{where or '/'}: keys {list(got)} vs golden {list(want)}"]
        return [d for k in got for d in json_differences(got[k], want[k], rel_tol, f"{where}/{k}")]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items vs golden {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in json_differences(g, w, rel_tol, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(got, numbers) and isinstance(want, numbers) and not isinstance(got, bool) and not isinstance(want, bool):
        return [] if math.isclose(got, want, rel_tol=rel_tol, abs_tol=1e-15) else [f"{where}: {got!r} vs golden {want!r}"]
    return [] if got == want else [f"{where}: {got!r} vs golden {want!r}"]


def csv_differences(got: str, want: str, rel_tol: float = REL_TOL) -> list[str]:
    """Cells that differ beyond float64 rounding, as 'row r, column c: got vs want'."""
    got_rows, want_rows = list(csv.reader(io.StringIO(got))), list(csv.reader(io.StringIO(want)))
    if len(got_rows) != len(want_rows):
        return [f"{len(got_rows)} rows, golden has {len(want_rows)}"]
    out = []
    for r, (g, w) in enumerate(zip(got_rows, want_rows)):
        if len(g) != len(w):
            out.append(f"row {r}: {len(g)} cells, golden has {len(w)}")
            continue
        out += [f"row {r}, column {c}: {a!r} vs golden {b!r}" for c, (a, b) in enumerate(zip(g, w))
                if not same_cell(a, b, rel_tol)]
    return out


def test_csv_compare_accepts_rounding_only():
    want = "g,x\nG=2,0.06569675254819739\n"
    assert csv_differences("g,x\nG=2,0.06569675254819737\n", want) == []
    assert csv_differences("g,x\nG=2,0.0656967525\n", want)  # the 11th digit: a real change
    assert csv_differences("g,x\nG=4,0.06569675254819739\n", want)  # text cells stay exact


def test_fit_tables_compare_to_the_fits_tolerance():
    want = {"rows": [{"arm": "gspo", "asymptote_mean": 0.9781510501, "n_fitted": 3}]}
    moved = {"rows": [{"arm": "gspo", "asymptote_mean": 0.9781510601, "n_fitted": 3}]}  # 1e-8 relative
    assert json_differences(moved, want, FIT_REL_TOL) == []
    assert json_differences({"rows": [{"arm": "gspo", "asymptote_mean": 0.9782, "n_fitted": 3}]}, want, FIT_REL_TOL)
    assert json_differences({"rows": [{"arm": "dfpo", "asymptote_mean": 0.9781510501, "n_fitted": 3}]}, want, FIT_REL_TOL)
    assert csv_differences("a\n0.9781510601\n", "a\n0.9781510501\n", FIT_REL_TOL) == []
    assert csv_differences("a\n0.9781510601\n", "a\n0.9781510501\n")  # every other table: 12 digits


@pytest.mark.parametrize("case", sorted(case_options()))
def test_report_files_match_the_golden_copy(case, tmp_path):
    build_case(case, tmp_path)
    expected = [p.relative_to(GOLDEN_DIR / case) for p in golden_files(GOLDEN_DIR / case)]
    written = [p.relative_to(tmp_path) for p in golden_files(tmp_path)]
    assert written == expected
    for name in expected:
        got, want = (tmp_path / name).read_text(), (GOLDEN_DIR / case / name).read_text()
        if got == want:
            continue
        if name.name.startswith("compute_scaling"):  # a least-squares fit's numbers: FIT_REL_TOL
            differences = (csv_differences(got, want, FIT_REL_TOL) if name.suffix == ".csv"
                           else json_differences(json.loads(got), json.loads(want), FIT_REL_TOL))
            assert differences == [], f"{case}: {name} differs beyond the fit's tolerance"
            continue
        assert name.suffix == ".csv", f"{case}: {name} differs"
        assert csv_differences(got, want) == [], f"{case}: {name} differs beyond float64 rounding"
