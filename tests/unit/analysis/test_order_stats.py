"""The fast order statistics give numpy's numbers exactly: medians, linear quantiles, row medians."""

from __future__ import annotations

import numpy as np
import pytest

from sb_fleet.analysis.order_stats import median, quantiles, row_nanmedian

QS = (0.0, 0.001, 0.02, 0.25, 0.5, 0.75, 0.98, 0.999, 1.0)


def samples() -> list[np.ndarray]:
    rng = np.random.default_rng(20261126)
    out = [np.array([3.5]), np.array([2.0, -1.0]), np.array([1.0, 1.0, 1.0, 1.0])]
    for n in list(range(1, 40)) + [99, 100, 1001, 80_000, 80_001]:
        out.append(rng.normal(1.0, 0.01, n))
        out.append(rng.integers(0, 5, n).astype(float))  # many ties
        out.append(np.exp(rng.normal(0, 20, n)))  # values across many magnitudes
    return out


@pytest.mark.parametrize("i", range(len(samples())))
def test_median_and_quantiles_are_numpys_bit_for_bit(i: int) -> None:
    x = samples()[i]
    before = x.copy()
    assert median(x) == float(np.median(x))
    want = np.quantile(x, QS)
    got = quantiles(x, QS)
    assert got == [float(v) for v in want]
    assert np.array_equal(x, before)  # the input's order is kept


def test_empty_input_gives_nan() -> None:
    assert np.isnan(median(np.array([])))
    assert all(np.isnan(v) for v in quantiles(np.array([]), (0.5, 0.9)))


@pytest.mark.parametrize("width", [1, 2, 3, 7, 8, 9])
def test_row_nanmedian_is_numpys(width: int) -> None:
    rng = np.random.default_rng(width)
    block = rng.normal(100.0, 3.0, (500, width))
    block[rng.random(block.shape) < 0.2] = np.nan  # rows with every count of values, none included
    block[0, :] = np.nan
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanmedian(block, axis=1)
    got = row_nanmedian(block)
    assert np.array_equal(got, want, equal_nan=True)
    full = rng.normal(5.0, 1.0, (300, width))
    assert np.array_equal(row_nanmedian(full), np.median(full, axis=1))
