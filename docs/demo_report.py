"""The picture of the demo's report on README's first screen (docs/demo-report.png), redrawn from what
README line 1 leaves in `results/lab-demo/`: the report's reward-vs-compute plot above its claims table
(verdict, effect with its 95% CI, seeds).

Usage, from the repository root after README line 1: python docs/demo_report.py [RESULTS] [--output PNG]
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

HERE = Path(__file__).resolve().parent
VERDICT_COLORS = {"supported": "#d9f2d9", "contradicted": "#f8d7d7"}  # inconclusive / cannot judge: none


def draw(results: Path, output: Path) -> Path:
    claims = pd.read_csv(results / "tables" / "claims.csv")
    plot = mpimg.imread(results / "plots" / "reward_vs_compute.png")
    rows = [[c.claim_id, textwrap.fill(str(c.statement), 58), c.group, textwrap.fill(str(c.verdict), 30),
             _effect(c), "" if pd.isna(c.n_seeds) else f"{int(c.n_seeds)}"] for c in claims.itertuples()]
    height_plot = 11.0 * plot.shape[0] / plot.shape[1]
    height_table = 0.21 * (1 + sum(max(cell.count("\n") + 1 for cell in row) for row in rows)) + 0.1
    fig = plt.figure(figsize=(11.0, height_plot + height_table + 0.5))
    top = fig.add_axes((0.0, height_table / (height_plot + height_table + 0.5), 1.0, height_plot / (height_plot + height_table + 0.5)))
    top.imshow(plot)
    top.axis("off")
    bottom = fig.add_axes((0.0, 0.0, 1.0, height_table / (height_plot + height_table + 0.5)))
    bottom.axis("off")
    table = bottom.table(cellText=rows, colLabels=["claim", "statement", "group", "verdict", "effect [95% CI]", "seeds"],
                         colWidths=[0.14, 0.36, 0.1, 0.2, 0.15, 0.05], loc="upper center", cellLoc="left")
    table.auto_set_column_width([4])
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (row, _), cell in table.get_celld().items():
        lines = 1 if row == 0 else max(text.count("\n") + 1 for text in rows[row - 1])
        cell.set_height(0.21 * lines / height_table)
        if row == 0:
            cell.set_text_props(weight="bold")
        else:
            status = str(claims.iloc[row - 1]["verdict"]).split(",")[0].split(" ")[0]
            cell.set_facecolor(VERDICT_COLORS.get(status, "white"))
    fig.suptitle(f"cancelctl report --baseline gspo: the lab demo's claims ({claims['n_seeds'].max():.0f} seeds)",
                 y=1.0, fontsize=11)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=90, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)
    return output


def _effect(claim) -> str:
    if pd.isna(claim.effect):
        return ""
    return f"{claim.effect:+.3g} [{claim.ci_lo:+.3g}, {claim.ci_hi:+.3g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="?", default="results/lab-demo", type=Path, help="the demo report's folder")
    parser.add_argument("--output", default=HERE / "demo-report.png", type=Path)
    args = parser.parse_args()
    print(draw(args.results, args.output))


if __name__ == "__main__":
    main()
