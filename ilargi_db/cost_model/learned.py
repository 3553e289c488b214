"""The learned model: gradient boosting on the log-residual of the analytical model.

Two :class:`~sklearn.ensemble.GradientBoostingRegressor` read log-scaled job
features and the roofline's phases: one predicts the log-residual of the
geometric mean of both strategies' seconds, the other that of their ratio.
Far from the calibration grid the trees predict a constant correction, so
extrapolation follows the roofline's physics.

The package ships measurements (a CSV of the default grid), not a pickle: a
pickled scikit-learn model breaks across scikit-learn versions. The model is
fitted from them deterministically (fixed random_state) the first time a
machine needs it, and its trees are exported to plain arrays in the cache
directory (keyed by the CSV's hash and the scikit-learn version): later
processes load them in milliseconds and predict with NumPy, without importing
scikit-learn's ensemble module or fitting again.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ilargi_db.cost_model.analytical import STRATEGIES, breakdown
from ilargi_db.cost_model.features import ALGORITHMS
from ilargi_db.cost_model.hardware import Hardware

SHIPPED = "data/default_calibration.csv"
# Job features the regressor reads, log-scaled (all are positive counts or ratios).
LOG_FEATURES = (
    "rows",
    "rows_fact",
    "columns",
    "columns_fact",
    "columns_dimensions",
    "columns_onehot",
    "n_sources",
    "tuple_ratio",
    "tuple_ratio_min",
    "feature_ratio",
    "redundancy_max",
    "fact_fanout",
    "cells_materialized",
    "cells_factorized",
    "comp_ratio",
    "iterations",
    "rank",
)
PLAIN_FEATURES = ("sparsity", "empty_share_max")
_MODELS: dict[tuple, CostModel] = {}
MODEL_VERSION = 1  # bump when the design matrix or the regressors change: cached exports are refitted


class Trees:
    """A fitted gradient-boosting regressor as plain arrays, predicting with NumPy.

    All trees' nodes are concatenated; ``left``/``right`` index into them, -1 at a leaf.
    """

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.roots = arrays["roots"]
        self.feature, self.threshold = arrays["feature"], arrays["threshold"]
        self.left, self.right, self.value = arrays["left"], arrays["right"], arrays["value"]
        self.init, self.rate = float(arrays["init"][0]), float(arrays["rate"][0])

    @classmethod
    def export(cls, model) -> Trees:
        parts: dict[str, list] = {k: [] for k in ("feature", "threshold", "left", "right", "value")}
        roots, offset = [], 0
        for estimator in model.estimators_[:, 0]:
            t = estimator.tree_
            roots.append(offset)
            parts["feature"].append(t.feature)
            parts["threshold"].append(t.threshold)
            parts["left"].append(np.where(t.children_left >= 0, t.children_left + offset, -1))
            parts["right"].append(np.where(t.children_right >= 0, t.children_right + offset, -1))
            parts["value"].append(t.value[:, 0, 0])
            offset += t.node_count
        init = float(np.ravel(model.init_.constant_)[0])
        arrays = {k: np.concatenate(v) for k, v in parts.items()}
        arrays.update(roots=np.asarray(roots), init=np.asarray([init]), rate=np.asarray([model.learning_rate]))
        return cls(arrays)

    def predict_one(self, x: np.ndarray) -> float:
        total = 0.0
        feature, threshold, left, right = self.feature, self.threshold, self.left, self.right
        for node in self.roots:
            while left[node] >= 0:
                node = left[node] if x[feature[node]] <= threshold[node] else right[node]
            total += self.value[node]
        return self.init + self.rate * total


def hardware_of(row: dict) -> Hardware:
    """The machine a calibration row was measured on."""
    return Hardware(
        cores=int(row["cores"]),
        memory_bandwidth_gbs=float(row["memory_bandwidth_gbs"]),
        gflops=float(row["gflops"]),
        gpu_name=str(row.get("gpu_name", "") or ""),
        gpu_memory_gb=float(row.get("gpu_memory_gb", 0) or 0),
        gpu_bandwidth_gbs=float(row.get("gpu_bandwidth_gbs", 0) or 0),
    )


def design_row(features: dict, hardware: Hardware, backend: str = "numpy") -> tuple[list[float], dict[str, float]]:
    """The regressor's input for one job, and the analytical log-seconds of each strategy (the prior).

    Log features, plain shares, the algorithm one-hot, then the prior: the log-seconds
    of both strategies, their difference and each strategy's data and iteration phases.
    """
    x = [math.log1p(max(float(features[name]), 0.0)) for name in LOG_FEATURES]
    x += [float(features[name]) for name in PLAIN_FEATURES]
    x += [1.0 if features["algorithm"] == a else 0.0 for a in ALGORITHMS]
    phases = {s: breakdown(features, s, hardware, backend) for s in STRATEGIES}
    prior = {s: math.log(max(sum(phases[s].values()), 1e-6)) for s in STRATEGIES}
    x += [prior["factorized"], prior["materialized"], prior["materialized"] - prior["factorized"]]
    x += [math.log(phases[s][phase] + 1e-6) for s in STRATEGIES for phase in ("data", "iterations")]
    return x, prior


def _regressor():
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.05, random_state=0)


@dataclass
class CostModel:
    """Predicts the seconds of both strategies: the analytical prior times a learned correction.

    Two regressors share the design matrix: one for the log-residual of the
    geometric mean of both times (how long the job takes) and one for the
    log-residual of the ratio materialized / factorized (which one wins).
    Fitting the ratio directly makes the decision as accurate as the model can
    be: errors of two separate per-strategy fits would add up in it.
    """

    description: str
    regressors: dict[str, Trees] | None = None  # "level" and "ratio"; None: analytical only
    n_jobs: int = 0

    @classmethod
    def fit(cls, rows: list[dict], description: str) -> CostModel:
        X, level, ratio = [], [], []
        for row in rows:
            x, prior = design_row(row, hardware_of(row), str(row.get("backend", "numpy")))
            X.append(x)
            f = math.log(max(float(row["seconds_factorized"]), 1e-6)) - prior["factorized"]
            m = math.log(max(float(row["seconds_materialized"]), 1e-6)) - prior["materialized"]
            level.append((f + m) / 2)
            ratio.append(m - f)
        X = np.asarray(X)
        regressors = {name: Trees.export(_regressor().fit(X, y)) for name, y in (("level", level), ("ratio", ratio))}
        return cls(description, regressors, len(rows))

    def predict(self, features: dict, hardware: Hardware, backend: str = "numpy") -> dict[str, dict[str, float]]:
        """Per strategy: ``seconds`` (the prediction), ``analytical`` seconds and the learned ``correction`` factor."""
        x, prior = design_row(features, hardware, backend)
        level = ratio = 0.0
        if self.regressors:
            x = np.asarray(x, dtype=np.float32)  # scikit-learn's trees split on float32 features
            level = self.regressors["level"].predict_one(x)
            ratio = self.regressors["ratio"].predict_one(x)
        correction = {"factorized": level - ratio / 2, "materialized": level + ratio / 2}
        return {
            s: {
                "seconds": math.exp(prior[s] + correction[s]),
                "analytical": math.exp(prior[s]),
                "correction": math.exp(correction[s]),
            }
            for s in STRATEGIES
        }

    def decide(self, features: dict, hardware: Hardware, backend: str = "numpy") -> str:
        p = self.predict(features, hardware, backend)
        return "factorized" if p["factorized"]["seconds"] < p["materialized"]["seconds"] else "materialized"

    def accuracy(self, rows: list[dict]) -> float:
        """Share of measured jobs on which the model picks the faster strategy."""
        if not rows:
            return float("nan")
        right = 0
        for row in rows:
            truth = "factorized" if row["seconds_factorized"] < row["seconds_materialized"] else "materialized"
            right += self.decide(row, hardware_of(row), str(row.get("backend", "numpy"))) == truth
        return right / len(rows)


def shipped_path() -> Path:
    """The default calibration shipped with the package (measured on the development machine)."""
    return Path(str(resources.files("ilargi_db.cost_model").joinpath(SHIPPED)))


# A CPU calibration of fewer jobs than this (e.g. cut short by a budget) is fitted together with the shipped
# measurements, so that a handful of jobs refines the shipped model instead of replacing it.
MIN_OWN_JOBS = 100


def load_model(
    path: str | os.PathLike | None = None, refresh: bool = False, cache: str | os.PathLike | None = None
) -> CostModel:
    """The model fitted on the calibration CSV at ``path`` (None: the shipped one).

    A small CPU calibration (under ``MIN_OWN_JOBS`` jobs) is fitted with the
    shipped measurements added. Cached in memory per file version, and on disk
    (``cache``, default the cache directory) as exported trees keyed by the
    measurements' hash and scikit-learn's version.
    """
    from ilargi_db.cost_model.calibration import read_rows
    from ilargi_db.cost_model.hardware import cache_dir

    shipped = path is None
    path = Path(shipped_path() if shipped else path)
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if refresh or key not in _MODELS:
        rows = read_rows(path)
        if not rows:
            return analytical_model()
        sources = [path]
        if shipped:
            described = (
                f"shipped default (fitted on {len(rows)} jobs measured on a {int(rows[0]['cores'])}-core machine)"
            )
        else:
            described = f"calibrated on this machine ({path}, {len(rows)} jobs)"
            cpu = all(str(r.get("backend", "numpy")) == "numpy" for r in rows)
            if cpu and len(rows) < MIN_OWN_JOBS:
                shipped_rows = read_rows(shipped_path())
                rows = rows + shipped_rows
                sources.append(shipped_path())
                described = described[:-1] + f" plus the {len(shipped_rows)} shipped ones)"
        _MODELS[key] = _cached_fit(rows, described, sources, Path(cache_dir(cache)), refresh)
    return _MODELS[key]


def _cached_fit(rows: list[dict], described: str, sources: list[Path], folder: Path, refresh: bool) -> CostModel:
    import sklearn

    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    stored = folder / f"model-v{MODEL_VERSION}-{digest}-sklearn{sklearn.__version__}.npz"
    if not refresh:
        try:
            with np.load(stored) as saved:
                regressors = {
                    name: Trees({k.split(".", 1)[1]: saved[k] for k in saved.files if k.startswith(name + ".")})
                    for name in ("level", "ratio")
                }
            return CostModel(described, regressors, len(rows))
        except (OSError, ValueError, KeyError):
            pass  # not fitted on this machine yet, or unreadable: fit
    model = CostModel.fit(rows, described)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {f"{name}.{k}": v for name, trees in model.regressors.items() for k, v in trees.arrays.items()}
        tmp = stored.with_suffix(".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(stored)
    except OSError:
        pass  # a read-only cache: fit again next process
    return model


def analytical_model() -> CostModel:
    """The roofline model alone: for a backend with no calibration (e.g. a GPU never calibrated)."""
    return CostModel("analytical (roofline: FLOPs and bytes over measured throughput; no calibration yet)")
