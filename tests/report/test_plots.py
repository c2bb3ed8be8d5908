"""The plots' frames: a title never wider than its figure, one legend below the panels."""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cancelctl.report.plots import _finish


def test_a_one_panel_figures_long_title_is_wrapped_inside_it_and_its_legend_sits_below(tmp_path):
    """A one-group sweep's reward plot (5.4 in wide) once showed "raining reward vs compute"."""
    fig = Figure(figsize=(5.4, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for arm in ("gspo", "dfpo-min-replace", "grpo", "grpo-symclip"):
        ax.plot([0, 1], [0, 1], label=arm)
    title = "Training reward vs compute (mean, 95% t band; dashed: ScaleRL fit) — a title as long as a real one"
    _finish(fig, title, tmp_path / "plot.png", [ax])
    renderer = fig.canvas.get_renderer()
    box = fig._suptitle.get_window_extent(renderer)
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and "\n" in fig.get_suptitle()
    (legend,) = fig.legends
    assert legend.get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0  # below, not over the curves
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_the_legend_names_every_arm_any_panel_drew_once_even_one_missing_from_the_first(tmp_path):
    """A group where an arm logged nothing (its panel has no curve of it) must not drop the arm from the
    figure's one legend; a label every panel draws (κ's line) appears once."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    first, second = fig.subplots(1, 2)
    first.plot([0, 1], [0, 1], label="gspo")
    second.plot([0, 1], [0, 1], label="gspo")
    second.plot([0, 1], [1, 0], label="dfpo-min-replace")  # absent from the first panel
    for ax in (first, second):
        ax.axhline(0.5, label="κ = 0.5")
    _finish(fig, "Training reward vs compute", tmp_path / "plot.png", [first, second])
    (legend,) = fig.legends
    assert [text.get_text() for text in legend.get_texts()] == ["gspo", "κ = 0.5", "dfpo-min-replace"]
