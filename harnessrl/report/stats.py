"""Confidence intervals and pass@k, deterministic: the same episodes always give the same numbers.

Rates of independent yes/no episodes (success, asked a question) get Wilson intervals, which stay
inside [0, 1] and behave at 0 and 1 where the normal approximation collapses. Everything else
(means per episode, and ratios over turns whose turns within one episode are not independent) gets a
percentile bootstrap over episodes with a fixed seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054  # two-sided 95%
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial rate; (0, 1) when there are no trials."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 or n successes the matching end is exact: rounding must not move it off 0 or 1.
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return lo, hi


def bootstrap_ratio(num: Sequence[float], den: Sequence[float] | None = None) -> tuple[float, float]:
    """95% percentile interval of sum(num)/sum(den) (den = 1 per item: the mean), resampling items."""
    x = np.asarray(num, dtype=float)
    y = np.ones_like(x) if den is None else np.asarray(den, dtype=float)
    if len(x) == 0:
        return 0.0, 0.0
    idx = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(x), size=(BOOTSTRAP_RESAMPLES, len(x)))
    stats = x[idx].sum(1) / np.maximum(y[idx].sum(1), 1e-12)
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return float(lo), float(hi)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from n samples with c correct (Chen et al. 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
