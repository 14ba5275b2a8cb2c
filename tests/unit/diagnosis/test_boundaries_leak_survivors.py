"""The leak fit's R² threshold at exactly 0.8 (issue 18, mutation survivor): a series whose
least-squares R² is 0.8 to the last bit of a float is a leak (the rule is R² >= 0.8). Found by
search over small series: 0, 0, 3, 2, 3, 4 (x 256 MiB) at steps 0..5 has R² = 0.8
exactly (sxy = 14, sxx = 17.5, syy = 14 in 256 MiB units: 196 / 245). Literal numbers."""

from __future__ import annotations

import pytest

from gpu_auditor.diagnosis.leak import _fit, detect_growth

pytestmark = pytest.mark.unit

Q = 256 * 2**20  # 256 MiB


def test_r2_of_exactly_0_8_is_a_leak() -> None:
    units = [0, 0, 3, 2, 3, 4]
    points = [(float(t), u * Q) for t, u in enumerate(units)]
    slope, r2 = _fit([t for t, _ in points], [float(v) for _, v in points])
    assert r2 == 0.8 and slope == 0.8 * Q
    growth = detect_growth(points, "samples")
    assert growth is not None
    assert (growth.points, growth.first_bytes, growth.last_bytes) == (6, 0, 4 * Q)
