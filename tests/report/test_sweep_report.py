"""`report SWEEP` reports the runs of the sweep file as it is now: runs of an earlier version (an edited
arm) are listed as stale, never averaged in (issue: a report mixed two learning rates silently)."""

import textwrap

from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.report.sweep_report import report_sweep

SWEEP = """
name: rt
base:
  backend: lab
  executor: debug
  rollout: {G: 4, max_new_tokens: 8}
  algorithm: {lr: 5.0e-4, mini_batch_size: 2}
  budget: {steps: 2, prompts_per_step: 4}
  lab: {d_model: 16, n_heads: 2, warmstart_steps: 5, max_operand: 5}
  eval: {every: 2, k: 1, prompts: 4}
arms:
  a: {algorithm: {loss: grpo}}
  b: {algorithm: {loss: gspo{lr}}}
seeds: [0, 1, 2]
baseline: a
"""


def test_report_leaves_out_runs_of_an_earlier_version_of_the_sweep(tmp_path):
    path, work = tmp_path / "rt.yaml", tmp_path / "work"
    runner = CliRunner()
    path.write_text(textwrap.dedent(SWEEP.replace("{lr}", "")))
    assert runner.invoke(app, ["sweep", str(path), "-w", str(work)]).exit_code == 0
    path.write_text(textwrap.dedent(SWEEP.replace("{lr}", ", lr: 1.0e-3")))  # arm b edited
    result = runner.invoke(app, ["sweep", str(path), "-w", str(work)])
    assert result.exit_code == 0 and "submitted 3" in result.output, result.output

    report = report_sweep(work, "rt", out=tmp_path / "report")
    scores = report.table("final_scores").data
    assert set(scores["n_seeds"]) == {3}  # was 6 for arm b: both learning rates averaged
    stale = [note for note in report.notes if "stale" in note]
    assert len(stale) == 1 and stale[0].startswith("3 run(s) of earlier versions") and "b-s0" in stale[0]

    # the tracking server down: the same report from the run folders, saying so (was a traceback)
    offline = report_sweep(work, "rt", out=tmp_path / "offline", uri="http://127.0.0.1:9")
    assert any("unreachable" in note and "run folders" in note for note in offline.notes)
    cols = ["group", "arm", "benchmark", "n_seeds", "mean"]
    assert offline.table("final_scores").data[cols].equals(scores[cols])


def test_a_rebuilt_manifest_keeps_the_baseline_and_says_the_damage_in_words(tmp_path, caplog):
    """A damaged manifest is rebuilt from the run folders, which hold no sweep file: `report` then
    exited 2 for want of a baseline until `sweep` ran again, and the warning named a class
    ("JSONDecodeError: Expecting value ..."). The baseline comes back; the cause is said in words."""
    import json
    import logging

    from cancelctl.manifest import Manifest, RunEntry
    from cancelctl.report.sweep_report import sweep_baseline
    from cancelctl.workdir import sweep_paths

    work = tmp_path / "work"
    paths = sweep_paths(work, "rt")
    run_dir = paths.run_dir("abc123", "a-s0")
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": "abc123", "name": "a-s0", "run": {
        "arm": "a", "seed": 0, "group": "", "spec": {"executor": "debug"}}}))
    paths.store.save(Manifest(sweep="rt", executor="debug", file=str(tmp_path / "rt.yaml"), baseline="b",
                              runs={"abc123": RunEntry("a-s0", "a", 0)}))
    for damage, cause in (("garbage{", "not JSON: Expecting value at line 1 column 1"),
                          ('{"version": 1}', "manifest: no sweep, executor"), (None, "is missing")):
        if damage is None:
            paths.manifest.unlink()
        else:
            paths.manifest.write_text(damage)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cancelctl.launch"):
            assert sweep_baseline(work, "rt") == "b"
        assert cause in caplog.text and "Error" not in caplog.text and "__init__" not in caplog.text, caplog.text
        rebuilt = paths.store.load()
        assert (rebuilt.baseline, rebuilt.file, list(rebuilt.runs)) == ("b", str(tmp_path / "rt.yaml"), ["abc123"])


def test_a_sweep_file_gone_or_broken_since_launch_is_said_not_its_claims_dropped_in_silence(tmp_path):
    """The report judges the claims of the sweep file the manifest recorded at launch. When that file was
    moved (a rerun from a temp copy of the project, then the copy deleted) the claims section vanished
    and nothing said why; now a note names the file and how to record it again."""
    claims = ("claims:\n  - {id: b-final, source: a test, statement: b ends higher than a, metric: {kind: final}, "
              "direction: higher, arm: b, versus: a}\n")
    path, work = tmp_path / "rt.yaml", tmp_path / "work"
    written = textwrap.dedent(SWEEP.replace("{lr}", "")) + claims
    path.write_text(written)
    assert CliRunner().invoke(app, ["sweep", str(path), "-w", str(work)]).exit_code == 0
    judged = report_sweep(work, "rt", out=tmp_path / "judged")
    assert judged.table("claims") and not [note for note in judged.notes if "sweep file" in note]

    for change, said in ((lambda: path.rename(tmp_path / "moved.yaml"), "recorded at launch is gone"),
                         (lambda: path.write_text("name: rt\nbase: [\n"), "no longer loads ("),
                         (lambda: path.write_text(written.replace("name: rt", "name: other")),
                          "now names sweep 'other'")):
        path.write_text(written)
        change()
        report = report_sweep(work, "rt", out=tmp_path / "unjudged")
        (note,) = [note for note in report.notes if str(path) in note]
        assert said in note and "claims are not judged" in note and "cancelctl sweep FILE" in note, note
        assert "claims" not in {table.name for table in report.tables}, said
