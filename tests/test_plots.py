"""The plots a person reads (issue 36, item 7): the table's unit and the metric's name on every axis, points on an
axis that starts where the scores are, every series in the legend, ingredients by recipe, GIS's α = 1 explained,
the timeline one row per model with its worker, a second try and a resume marked."""
import matplotlib

matplotlib.use("Agg")

from ladle.plots import gis_figure, scores_figure, timeline_figure  # noqa: E402


def results(**more):
    ingredients = [{"name": f"ingredient-0{i}", "val": v, "test": t, "sampler": {"name": s}}
                   for i, (v, t, s) in enumerate([(0.80, 0.81, "cluster"), (0.80, 0.81, "cluster"),
                                                  (0.82, 0.80, "saint-rw")])]
    return {"dataset": {"name": "Cora", "metric": "acc"}, "model": "gcn", "ingredients": ingredients,
            "best_ingredient": {"val": 0.82, "test": 0.80},
            "soups": {"gis": {"val": 0.83, "test": 0.82, "is_soup": True},
                      "ensemble": {"val": 0.81, "test": 0.815, "is_soup": False}},
            "baselines": {"long": {"val": 0.79, "test": 0.78}}, **more}


def test_the_scores_are_points_in_percent_with_every_series_in_the_legend():
    fig = scores_figure(results())
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ["validation accuracy (%)", "test accuracy (%)"]
    for ax in axes:
        assert not ax.containers  # points, not bars: no height for a cut axis to exaggerate
        ys = [y for c in ax.collections for _, y in c.get_offsets()]
        assert min(ys) >= 78 and max(ys) <= 83  # in percent, as the table
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels[:3] == ["00 cluster", "01 cluster", "02 saint-rw"]  # two tied ingredients, two columns
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert legend == {"ingredient", "soup (one model)", "ensemble (K models, not a soup)", "best ingredient (by val)",
                      "long (K× budget)"}


def test_gis_curves_name_the_metric_and_say_what_alpha_one_is():
    trace = [{"ingredient": "ingredient-00"},
             {"ingredient": "ingredient-01", "alphas": [0.0, 0.5, 1.0], "scores": [0.7, 0.8, 0.75], "alpha": 0.5,
              "score": 0.8}]
    fig = gis_figure({"trace": trace}, "rocauc")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "validation ROC-AUC (%)" and "α" in ax.get_xlabel()
    assert max(y for line in ax.get_lines() for y in line.get_ydata()) == 80.0
    assert any("α = 1 keeps the soup as it was" in t.get_text() for t in fig.texts)
    assert "chosen α" in {t.get_text() for t in ax.get_legend().get_texts()}


def test_the_timeline_has_a_row_per_model_and_marks_a_retry_and_a_resume():
    timeline = [{"name": "ingredient-00", "worker": "process-0 (pid 1)", "started": 0, "finished": 5, "session": "a"},
                {"name": "ingredient-01", "worker": "process-1 (pid 2)", "started": 0.2, "finished": 7,
                 "session": "a", "attempts": 2},
                {"name": "ingredient-02", "worker": "process-0 (pid 5)", "started": 20, "finished": 26,
                 "session": "b"}]
    ax = timeline_figure(timeline).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "ingredient-00 · process-0 (pid 1)", "ingredient-01 · process-1 (pid 2)", "ingredient-02 · process-0 (pid 5)"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["process-0", "process-1", "trained again (worker died)"]  # workers, not one per pid
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "try 2" in texts and "stopped; resumed" in texts
    assert ax.get_xlabel() == "seconds since the first model started"
    one_session = timeline_figure([dict(t, session="a", attempts=1) for t in timeline]).axes[0]
    assert not one_session.texts
