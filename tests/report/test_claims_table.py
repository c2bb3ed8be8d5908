"""The sweep file's claims as the report's first table: verdicts on a synthetic sweep with planted
effects (dfpo's high-frequency energy share is 0.15 vs gspo's 0.30, its final accuracy higher)."""

from report_frames import report_for, synthetic_sweep

from cancelctl.spec.claims import ClaimSpec

CLAIMS = [
    ClaimSpec.model_validate(c)
    for c in (
        {"id": "energy", "source": "[D] §6.1", "statement": "DFPO lowers high-frequency energy",
         "metric": {"kind": "mean", "key": "cancel/energy_b{last}"}, "direction": "lower",
         "arm": "dfpo", "versus": "gspo"},
        {"id": "energy-wrong", "source": "[D] §6.1", "statement": "planted wrong way round",
         "metric": {"kind": "mean", "key": "cancel/energy_b{last}"}, "direction": "higher",
         "arm": "dfpo", "versus": "gspo"},
        {"id": "dispersion", "source": "docs/metrics.md", "statement": "not logged in this sweep",
         "metric": {"kind": "mean", "key": "dfpo/weight_dispersion"}, "direction": "lower",
         "arm": "dfpo", "versus": "gspo"},
    )
]


def test_claims_table_judges_each_claim_per_group(tmp_path):
    runs, metrics = synthetic_sweep(seeds=(0, 1, 2, 3, 4))
    report = report_for(tmp_path, runs, metrics, claims=CLAIMS)
    assert report.tables[0].name == "claims"
    data = report.table("claims").data.set_index(["claim_id", "group"])
    for group in ("rollout.G=4", "rollout.G=8"):
        assert data.loc[("energy", group), "status"] == "supported"
        assert data.loc[("energy", group), "effect"] < -0.1
        assert data.loc[("energy-wrong", group), "status"] == "contradicted"
        assert "not logged" in data.loc[("dispersion", group), "verdict"]
    assert (tmp_path / "synthetic" / "tables" / "claims.json").is_file()


def test_claims_only_hides_every_other_table_and_leaves_the_written_report_alone(tmp_path):
    """`report --claims-only` once rewrote report.md (100 → 18 lines) and report.html with the
    claims alone. It prints the claims; the folder keeps the last full report, byte for byte."""
    full = report_for(tmp_path, claims=CLAIMS, plots=False)
    written = {path: path.read_bytes() for path in sorted(full.out_dir.rglob("*")) if path.is_file()}
    assert full.out_dir / "report.md" in written and full.out_dir / "tables" / "final_scores.csv" in written
    report = report_for(tmp_path, claims=CLAIMS, claims_only=True)
    assert [t.name for t in report.tables if t.shown] == ["claims"]
    assert report.files == [] and report.plots == {}
    assert {path: path.read_bytes() for path in sorted(full.out_dir.rglob("*")) if path.is_file()} == written
    nothing_yet = report_for(tmp_path / "fresh", claims=CLAIMS, claims_only=True)
    assert not nothing_yet.out_dir.exists()


def test_no_claims_no_table(tmp_path):
    report = report_for(tmp_path)
    assert "claims" not in [t.name for t in report.tables]


def test_a_trend_claim_is_one_row_along_the_axis(tmp_path):
    """A claim along rollout.G: one row for both G, its slope (dfpo − gspo energy share is −0.15 at
    every G: no trend), the effect at each G in the notes and the table files."""
    import json

    trend = ClaimSpec.model_validate(
        {"id": "energy-flat-in-G", "source": "[D] Table 4", "statement": "the energy gap does not change with G",
         "metric": {"kind": "mean", "key": "cancel/energy_b{last}"}, "direction": "similar", "margin": 0.01,
         "arm": "dfpo", "versus": "gspo", "along": {"axis": "rollout.G", "scale": "log"}}
    )
    runs, metrics = synthetic_sweep(seeds=(0, 1, 2, 3, 4))
    report = report_for(tmp_path, runs, metrics, claims=[*CLAIMS, trend])
    table = report.table("claims")
    [row] = table.data[table.data["claim_id"] == "energy-flat-in-G"].to_dict("records")
    assert row["group"] == "rollout.G in {4, 8}" and row["status"] == "supported" and row["n_seeds"] == 5
    assert row["effect"] == 0.0 and row["axis"] == "rollout.G"
    assert len(table.data) == 3 * 2 + 1  # the per-group claims per G, the trend once
    assert any(n.startswith("energy-flat-in-G (rollout.G in {4, 8}): arm − versus at rollout.G=4: -0.15") for n in table.notes)
    saved = json.loads((tmp_path / "synthetic" / "tables" / "claims.json").read_text())
    [record] = [r for r in saved["rows"] if r["claim_id"] == "energy-flat-in-G"]
    assert [[round(x, 9) for x in pair] for pair in record["axis_effects"]] == [[4.0, -0.15], [8.0, -0.15]]
    assert "slope of arm − versus per doubling of rollout.G" in (tmp_path / "synthetic" / "report.md").read_text()
