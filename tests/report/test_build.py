"""build_report end to end on a synthetic sweep (3 arms × 2 G × 3 seeds): the files it writes, the
console, the refusal of unmatched arms, unfinished runs, bad arguments."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from report_frames import report_for, synthetic_sweep

from cancelctl.errors import SpecError
from cancelctl.errors import UnmatchedArmsError
from cancelctl.report.prepared import NOT_MATCHED


def test_writes_every_file(report):
    out = report.out_dir
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    for table in report.tables:
        assert (out / "tables" / f"{table.name}.csv").is_file()
        payload = json.loads((out / "tables" / f"{table.name}.json").read_text())
        assert payload["title"] == table.title and len(payload["rows"]) == len(table.data)
    plots = {p.name for p in (out / "plots").iterdir()}
    assert plots == {"reward_vs_compute.png", "compute_at_reward.png", "mechanisms_vs_step.png",
                     "performance_profile.png"}
    assert all(path.exists() for path in report.files)
    markdown = (out / "report.md").read_text()
    assert "## Final scores" in markdown and "— per run" not in markdown  # per-run detail: CSV/JSON only


def test_console_prints_the_tables(report):
    for title in ("Final scores", "Probability of improvement and IQM", "Compute@Reward", "Jitter2",
                  "Mechanism summary", "per group size G"):
        assert title in report.console_text
    assert "1.00×" in report.console_text


def test_html_is_self_contained(report):
    html = (report.out_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)
    assert "http://" not in html and "https://" not in html


def test_unmatched_arms_are_refused_with_names_and_numbers(tmp_path):
    runs, metrics = synthetic_sweep(token_scale={("grpo", 8): 1.5})
    with pytest.raises(UnmatchedArmsError) as caught:
        report_for(tmp_path, runs, metrics)
    message = str(caught.value)
    assert "rollout.G=8" in message and "gen_tokens_total" in message
    assert "grpo=1,920,000" in message and "gspo=1,280,000" in message
    assert "rollout.G=4" not in message
    assert isinstance(caught.value, SpecError) and caught.value.exit_code == 2
    assert not (tmp_path / "synthetic").exists()


def test_arms_on_different_gpus_are_refused_and_the_report_says_what_the_runs_ran_on(tmp_path):
    """An A100 40 GB arm beside an 80 GB one is refused like unmatched compute; forced,
    every table of that group says so, and the compute table names the hardware."""
    runs, metrics = synthetic_sweep()
    runs["hardware_cpu_kernels"] = "AVX512 avx2 avx512f"
    runs["hardware_gpu"] = "8× NVIDIA A100-SXM4-80GB (81920 MiB)"
    forty = (runs["arm"] == "grpo") & (runs["group"] == "rollout.G=8")
    runs.loc[forty, "hardware_gpu"] = "8× NVIDIA A100-SXM4-40GB (40960 MiB)"
    with pytest.raises(UnmatchedArmsError, match=r"rollout.G=8.*hardware differs across runs.*40GB"):
        report_for(tmp_path, runs, metrics)
    report = report_for(tmp_path, runs, metrics, allow_unmatched=True, plots=False)
    notes = report.table("compute_match").notes
    assert any(n.startswith("ran on: 8× NVIDIA A100-SXM4-80GB (81920 MiB) (15 runs); 8× NVIDIA A100-SXM4-40GB") for n in notes)
    assert not report.compute_matched and all("rollout.G=4" not in str(v) for v in report.violations)
    runs["hardware_gpu"] = "8× NVIDIA A100-SXM4-80GB (81920 MiB)"
    assert report_for(tmp_path / "same", runs, metrics, plots=False).compute_matched


def test_allow_unmatched_marks_every_table(tmp_path):
    runs, metrics = synthetic_sweep(token_scale={("grpo", 8): 1.5})
    report = report_for(tmp_path, runs, metrics, allow_unmatched=True, plots=False)
    assert not report.compute_matched
    for table in report.tables:
        if table.name != "compute_match":
            assert any(NOT_MATCHED in note and "rollout.G=8" in note for note in table.notes), table.name
        if "group" in table.data.columns:
            flags = table.data.groupby("group")["compute_matched"].all()
            assert not flags["rollout.G=8"] and flags["rollout.G=4"]
    assert "banner" in (report.out_dir / "report.html").read_text()
    assert NOT_MATCHED in (report.out_dir / "report.md").read_text()


def test_unfinished_runs_are_left_out_and_said(tmp_path):
    runs, metrics = synthetic_sweep()
    runs.loc[runs["run_id"] == "dfpo-G4-s2", "state"] = "FAILED"
    report = report_for(tmp_path, runs, metrics, plots=False)
    assert any("FAILED: 1" in note and "dfpo-G4-s2" in note for note in report.notes)
    counts = report.table("final_scores").data.set_index(["group", "arm"])["n_seeds"]
    assert counts[("rollout.G=4", "dfpo")] == 2 and counts[("rollout.G=8", "dfpo")] == 3


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(SpecError, match="baseline arm 'ppo' has no runs.*dfpo, grpo, gspo"):
        report_for(tmp_path, baseline="ppo")
    with pytest.raises(SpecError, match="--compute must be one of"):
        report_for(tmp_path, compute="flops")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_every_table_scrolls_in_its_own_box_and_long_text_cells_wrap(report):
    from cancelctl.report.render_html import NOWRAP_CHARS

    html = (report.out_dir / "report.html").read_text()
    assert html.count("<table>") == html.count('<div class="table-scroll"><table>') > 5
    cells = re.findall(r'<td class="(num|text)">([^<]*)</td>', html)
    assert cells and all((kind == "text") == (len(text) > NOWRAP_CHARS) for kind, text in cells if "&" not in text)


LAYOUT_PROBE = """<script>
window.addEventListener("load", () => document.body.setAttribute("data-layout", JSON.stringify({
  page_overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  images_past_edge: [...document.images].filter(i => i.getBoundingClientRect().right > document.documentElement.clientWidth + 1).length,
  tables_outside_a_box: [...document.querySelectorAll("table")].filter(t => !t.parentElement.classList.contains("table-scroll")).length,
})));
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="headless check needs Debian's chromium")
@pytest.mark.parametrize("width", [1400, 800])
def test_the_html_report_fits_the_screen_in_headless_chromium(report, tmp_path, width):
    """At 1400 px the claims table once ran off the page's right edge. Measured in the browser:
    the page itself never scrolls sideways (wide tables scroll inside their box), no plot passes the edge."""
    probed = tmp_path / "probed.html"
    probed.write_text((report.out_dir / "report.html").read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         f"--window-size={width},2000", "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout
    layout = json.loads(re.search(r'data-layout="([^"]*)"', dom).group(1).replace("&quot;", '"'))
    assert layout == {"page_overflow": 0, "images_past_edge": 0, "tables_outside_a_box": 0}, layout


@pytest.mark.skipif(CHROMIUM is None, reason="headless check needs Debian's chromium")
def test_html_renders_in_headless_chromium(report, tmp_path):
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={screenshot}", "--window-size=1400,3000",
            (report.out_dir / "report.html").as_uri(),
        ],
        check=True, capture_output=True, timeout=120,
    )
    assert screenshot.stat().st_size > 50_000  # a blank page is a few kB
