"""k-means (Lloyd) with k-means++ seeding; distances from factorized products, T never built."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np

from ilargi_db._terminal import progress
from ilargi_db.linalg import ScaledMatrix
from ilargi_db.models._base import SparseInputMixin, as_matrix, check_finite, check_input, to_host
from ilargi_db.models.algorithm import FixedMetrics, Metrics
from ilargi_db.models.estimator import (
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    Estimator,
    Interval,
    StrOptions,
    TransformerMixin,
    check_fitted,
)
from ilargi_db.models.estimator import random_state as check_random_state


def _assign(M: Any, centers: np.ndarray) -> tuple[Any, Any]:
    """Nearest center of every row, and ||c||^2 - 2 x.c for it (the squared distance less ||x||^2).

    The row norms do not change which center is nearest, so they stay out of the pass; the matrix
    fuses the product with the argmin, so no n x k scores are stored.
    """
    W = M.backend.asarray(-2 * centers.T, dtype=M.dtype)
    return M.nearest(W, M.backend.asarray((centers**2).sum(axis=1), dtype=M.dtype))


def _lloyd_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """One Lloyd pass over these rows (``reduce_rows``): per center, the sum of the rows nearest to it and
    their count, and the sum over the rows of ||c||^2 - 2 x.c for their center (the inertia less ||x||^2).

    On a partitioned matrix only these k x d sums travel, never the n labels.
    """
    W, offsets, k = args
    labels, closest = X.nearest(W, offsets)
    return X.group_sums(labels, k), X.backend.xp.bincount(labels, minlength=k), float(closest.sum())


def _squared_distances(M: Any, row_norms: Any, centers: Any) -> Any:
    """||x_i - c_j||^2 = ||x_i||^2 - 2 x_i . c_j + ||c_j||^2 (one LMM with C^T)."""
    xp = M.backend.xp
    centers = M.backend.asarray(centers, dtype=M.dtype)
    d2 = M @ centers.T  # n x centers, updated in place: one such array, not one per operation
    d2 *= -2
    d2 += row_norms[:, None]  # ||x||^2 - 2 x.c, as ||x||^2 + (-2 x.c): the same rounding
    d2 += (centers**2).sum(axis=1)[None, :]
    return xp.maximum(d2, 0, out=d2)


class KMeans(
    FixedMetrics, SparseInputMixin, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin, Estimator
):
    """k-means clustering over joined tables, without materializing the join.

    Parameters
    ----------
    n_clusters : int, default=8
        The clusters (centers) to find.
    init : {"k-means++", "random"} or array of shape (n_clusters, n_features), default="k-means++"
        How the centers start: k-means++ seeding, rows drawn at random, or these centers.
    n_init : int, default=1
        Runs from different seeds; the one with the lowest inertia is kept.
    max_iter : int, default=300
        Lloyd iterations of a run at most.
    tol : float, default=1e-4
        Stop when the centers move less than ``tol`` times the mean feature variance.
    random_state : int, RandomState or None
        The seed of the starting centers.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray of shape (n_samples,)
    inertia_ : float
    n_iter_ : int
    loss_curve_ : list of float
        Inertia after each iteration of the kept run.
    feature_scale_ : ndarray of shape (n_features,)
        Only for a model trained by ``ilargi_db.train(..., standardize=True)``: each column's standard deviation
        in training. ``cluster_centers_`` stay in the columns' own units; distances (``predict``,
        ``transform``, ``score``, ``inertia_``) are measured on the columns divided by it, as trained.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    >>> km = KMeans(n_clusters=2, random_state=0).fit(X)
    >>> sorted(km.cluster_centers_[:, 0].round(2).tolist())
    [0.05, 5.05]
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"k-means++", "random"}), "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        init: Any = "k-means++",
        n_init: int = 1,
        max_iter: int = 300,
        tol: float = 1e-4,
        random_state: Any = None,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> KMeans:
        """Cluster the rows of a NormalizedMatrix (factorized) or an array/sparse matrix."""
        self._validate_params()
        (X,) = check_input(self, X, reset=True)
        M = as_matrix(X)
        n, d = M.shape
        if n < self.n_clusters:
            raise ValueError(f"n_samples={n} should be >= n_clusters={self.n_clusters}.")
        rng = check_random_state(self.random_state)
        row_norms = M.row_norms_squared()
        # Mean feature variance (as scikit-learn scales tol): from colsums and row norms, factorized.
        mean = to_host(M.colsums()) / n
        variance = max(float(to_host(row_norms.sum())) / n - float(mean @ mean), 0.0) / d if d else 0.0
        threshold = self.tol * variance
        explicit = not isinstance(self.init, str)
        best = None
        with M.backend.hot_loop():
            for _ in range(1 if explicit else self.n_init):
                centers = self._initial_centers(M, row_norms, rng)
                run = self._lloyd(M, row_norms, centers, threshold)
                if best is None or run[2] < best[2]:
                    best = run
        self.cluster_centers_, self.labels_, self.inertia_, self.n_iter_, self.loss_curve_ = best
        return self

    def _initial_centers(self, M: Any, row_norms: Any, rng: np.random.RandomState) -> np.ndarray:
        n, d = M.shape
        k = self.n_clusters
        if not isinstance(self.init, str):
            centers = np.asarray(self.init, dtype=float)
            if centers.shape != (k, d):
                raise ValueError(f"init has shape {centers.shape}, expected ({k}, {d}).")
            return centers.copy()
        if self.init == "random":
            return to_host(M.rows(rng.choice(n, k, replace=False)))
        # Greedy k-means++: each new center is the best of a few D^2-weighted candidates. The n distances
        # stay where the rows are (on a GPU, the device): only the candidates' rows come to the host.
        xp = M.backend.xp
        trials = 2 + int(np.log(k))
        centers = np.empty((k, d))
        centers[0] = to_host(M.rows([rng.randint(n)]))[0]
        closest = _squared_distances(M, row_norms, centers[:1])[:, 0]
        for c in range(1, k):
            total = float(closest.sum())
            if total <= 0:
                centers[c:] = to_host(M.rows(rng.choice(n, k - c, replace=False)))
                break
            draws = M.backend.asarray(rng.uniform(size=trials) * total)
            candidates = xp.minimum(xp.searchsorted(xp.cumsum(closest), draws), n - 1)
            rows = to_host(M.rows(candidates))
            options = xp.minimum(closest[:, None], _squared_distances(M, row_norms, rows))
            pick = int(xp.argmin(options.sum(axis=0)))
            centers[c], closest = rows[pick], options[:, pick]
        return centers

    def _lloyd(self, M: Any, row_norms: Any, centers: np.ndarray, threshold: float) -> tuple:
        xp = M.backend.xp
        k = self.n_clusters
        total_norm = float(to_host(row_norms.sum()))
        losses: list[float] = []
        with progress(self.max_iter, "k-means") as bar:
            for _ in range(self.max_iter):
                # Assignment and new centers (X^T one-hot(labels) / counts) in one factorized pass.
                W = M.backend.asarray(-2 * centers.T, dtype=M.dtype)
                offsets = M.backend.asarray((centers**2).sum(axis=1), dtype=M.dtype)
                sums, counts, closest_sum = M.reduce_rows(_lloyd_sums, (), (W, offsets, k))
                losses.append(max(total_norm + closest_sum, 0.0))
                check_finite(losses[-1], "the inertia")
                counts, sums = to_host(counts), to_host(sums).T
                new = centers.copy()
                filled = counts > 0
                new[filled] = sums[filled] / counts[filled, None]
                if (~filled).any():  # an empty cluster takes the points farthest from their centers
                    _, closest = _assign(M, centers)
                    far = xp.argsort(-(closest + row_norms))[: int((~filled).sum())]  # on the device: n values
                    new[~filled] = to_host(M.rows(far))
                shift = float(((new - centers) ** 2).sum())
                centers = new
                bar.update()
                if shift <= threshold:
                    break
        labels, closest = _assign(M, centers)  # labels consistent with the final centers
        inertia = float(to_host(xp.maximum(row_norms + closest, 0).sum()))
        return centers, to_host(labels), inertia, len(losses), losses

    def _distances(self, X: Any) -> Any:
        """Squared distances of every row to every center, on the columns as trained (scaled, if they were)."""
        check_fitted(self)
        (X,) = check_input(self, X, reset=False)
        M, centers = as_matrix(X), np.asarray(self.cluster_centers_, dtype=float)
        scale = getattr(self, "feature_scale_", None)
        if scale is not None:  # centering cancels in a difference: dividing by the scale is the whole change
            scale = np.asarray(scale, dtype=float)
            M, centers = ScaledMatrix(M, np.zeros_like(scale), scale), centers / scale
        return _squared_distances(M, M.row_norms_squared(), centers)

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest center for every row."""
        distances = self._distances(X)
        return to_host(distances.argmin(axis=1))

    @property
    def _n_features_out(self) -> int:
        """The columns ``transform`` gives: a distance to each center."""
        return self.cluster_centers_.shape[0]

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distances of every row to every center (on the standardized columns if trained so)."""
        return np.sqrt(to_host(self._distances(X)))

    metrics = Metrics.CLUSTERING  # what the pipeline asks (models/algorithm.py)

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        return {"inertia": float(self.inertia_)}

    def score(self, X: Any, y: Any = None) -> float:
        """Opposite of the inertia of ``X`` against the centers (higher is better)."""
        return -float(to_host(self._distances(X)).min(axis=1).sum())
