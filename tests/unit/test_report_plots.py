"""report.html's plots say how far the written values are from the source's (issue #30): a NaN on one side only is
a difference, never hidden by a NaN-ignoring maximum."""
from __future__ import annotations

import numpy as np

from robo_ray.stages.report_html import difference


def test_plot_difference_names_a_nan_on_one_side() -> None:
    w = np.array([[1.0, np.nan], [2.0, 3.0]])
    assert difference(w, w.copy()) == "written = source at every step"
    assert difference(w, np.array([[1.0, np.nan], [2.0, 3.5]])) == "max |written - source| 0.5"
    assert difference(w, np.array([[1.0, 0.0], [2.0, 3.0]])) == "max |written - source| inf"
    assert difference(w, None).startswith("source not available")
    assert difference(w, np.zeros((3, 2))).startswith("source shape (3, 2) differs")
