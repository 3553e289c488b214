"""Linear and logistic regression over a normalized matrix (or any array)."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.linalg

from ilargi_db._terminal import progress
from ilargi_db.linalg import normal_equations_solver
from ilargi_db.models._base import (
    HostTargetScoreMixin,
    SparseInputMixin,
    as_matrix,
    check_finite,
    check_gram_size,
    check_input,
    minimize_lbfgs,
    record_not_converged,
    to_host,
    warn_if_not_converged,
)
from ilargi_db.models._duhl_solver import fit_duhl, host_rows
from ilargi_db.models._multinomial import MULTINOMIAL_SOLVERS, fit_multinomial, logistic_classes, softmax
from ilargi_db.models._row_sums import (
    _centered_target,
    _logistic,
    _logistic_curvature,
    _normal_product,
    _normal_statistics,
    _squared_error,
)
from ilargi_db.models.algorithm import FixedMetrics, Metrics
from ilargi_db.models.catalog import AUTO, CATALOG, MAX_GRAM_BYTES, SolverName
from ilargi_db.models.estimator import ClassifierMixin, Estimator, Interval, RegressorMixin, StrOptions, check_fitted
from ilargi_db.models.training_metrics import log_loss_metrics, regression_metrics


class _LinearModel(FixedMetrics, SparseInputMixin, Estimator):
    """Shared prediction: X @ coef_ + intercept_, factorized when X is a normalized matrix."""

    def _decision(self, X: Any) -> Any:
        check_fitted(self)
        (X,) = check_input(self, X, reset=False)
        M = as_matrix(X)
        coef, intercept = np.asarray(self.coef_), self.intercept_
        if np.ndim(intercept):  # multinomial: one per class, added on the device (CuPy refuses a NumPy operand)
            intercept = M.backend.asarray(intercept)
        return M @ M.backend.asarray(coef.T if coef.ndim == 2 else coef) + intercept


NORMAL_MAX_COLUMNS = 1024  # "auto" solves the normal equations up to this many columns
# Centering the Gram matrix of a column far from 0 beside its spread cancels digits: past this many (of double's
# 16), the normal equations' solution is refined with residuals computed on centered rows, a pass a step.
LOST_DIGITS_REFINED = 4.0
REFINEMENTS = 5


class LinearRegression(HostTargetScoreMixin, RegressorMixin, _LinearModel):
    """Least squares (optionally ridge) over joined tables, without materializing the join.

    Parameters
    ----------
    fit_intercept : bool, default=True
        Fit an intercept; no column of ones is ever built.
    alpha : float, default=0.0
        L2 penalty on ``coef_`` (ridge); the intercept is not penalized.
    solver : {"auto", "normal", "cg", "gd", "duhl"}, default="auto"
        ``"normal"``: normal equations through the factorized ``X^T X`` (Cholesky, falling back to least
        squares when ill-conditioned); it forms a dense d x d matrix. ``"cg"``: conjugate gradients on the
        normal equations with a Jacobi preconditioner, through ``X @ w``, ``X.T @ r`` and the factorized
        column norms only: memory linear in d, for wide (one-hot) data. ``"gd"``: accelerated gradient
        descent through the same products. ``"duhl"`` (ridge, alpha > 0): dual coordinate descent over row
        partitions, those of largest duality gap held (``ilargi_db.models.duhl``), the intercept exact by
        centering. ``"auto"``: ``"normal"`` up to ``NORMAL_MAX_COLUMNS`` (1,024) columns when the d x d
        matrix fits ``max_gram_bytes``, else ``"cg"`` (``train`` lets its cost model choose).
    max_iter : int, default=1000
        Iterations of ``"cg"`` and ``"gd"``; reaching it warns (``ConvergenceWarning``).
    tol : float, default=1e-6
        ``"cg"`` stops when the normal equations' residual falls below ``tol`` times
        ``||X^T y||`` (scikit-learn's LSQR uses the same default); ``"gd"`` when the
        relative decrease of the loss falls below it; ``"duhl"`` when the duality gap falls below
        ``tol`` times its value at the start (``duality_gap_``).
    max_gram_bytes : int, default=256 MiB
        The largest dense d x d matrix a solver may form (``"normal"`` refuses above it).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_iter_ : int
    solver_ : str
        The solver that ran.
    solver_reason_ : str
        Why (for ``solver="auto"``).
    loss_curve_ : list of float
        Mean squared error (plus penalty) after each iteration.
    feature_names_in_ : ndarray of str
        Column names, when fitted on a normalized matrix or a DataFrame.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [3.0, 5.0]])
    >>> model = LinearRegression().fit(X, X @ [2.0, -1.0] + 0.5)
    >>> np.round(model.coef_, 6), round(model.intercept_, 6), model.solver_
    (array([ 2., -1.]), 0.5, 'normal')
    >>> wide = LinearRegression(solver="cg").fit(X, X @ [2.0, -1.0] + 0.5)
    >>> np.round(wide.coef_, 6)
    array([ 2., -1.])
    """

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean"],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "solver": [StrOptions({AUTO, *CATALOG["linear_regression"].solver_names})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_gram_bytes": [Interval(Integral, 0, None, closed="left")],
    }

    def __init__(
        self,
        fit_intercept: bool = True,
        alpha: float = 0.0,
        solver: str = "auto",
        max_iter: int = 1000,
        tol: float = 1e-6,
        max_gram_bytes: int = MAX_GRAM_BYTES,
    ):
        self.fit_intercept = fit_intercept
        self.alpha = alpha
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.max_gram_bytes = max_gram_bytes

    def choose_solver(self, n_features: int) -> tuple[str, str]:
        """``(solver, why)`` for a matrix of ``n_features`` columns."""
        gram = 8 * n_features * n_features
        if self.solver != "auto":
            if self.solver == SolverName.NORMAL:
                check_gram_size(n_features, self.max_gram_bytes, 'solver="normal"')
            return self.solver, "chosen by the caller"
        if n_features <= NORMAL_MAX_COLUMNS and gram <= self.max_gram_bytes:
            small = f"the {n_features:,} x {n_features:,} normal equations are small"
            return SolverName.NORMAL, f"{n_features:,} columns: {small}"
        return SolverName.CG, (
            f"{n_features:,} columns: conjugate gradients need memory linear in the columns, where the normal "
            f"equations would form a {gram / 2**20:,.0f} MiB matrix"
        )

    def fit(self, X: Any, y: Any, coef_init: Any = None, *, warn: bool = True) -> LinearRegression:
        """Fit on a NormalizedMatrix (factorized) or an array/sparse matrix.

        ``coef_init`` warm-starts conjugate gradients (the normal equations ignore it). ``warn=False`` keeps a
        stop at ``max_iter`` in ``convergence_warning_`` only, for a caller that tells of it itself.
        """
        self._validate_params()
        self._coef_init = coef_init
        self.convergence_warning_ = None
        X, y = check_input(self, X, y, reset=True, y_numeric=True)
        M = as_matrix(X)
        y = M.backend.asarray(y, dtype=M.dtype)
        self._y_mean = float(y.sum()) / max(len(y), 1)  # here, before the rows are kept where they are
        y = M.keep_rows(y)  # sliced once, where the rows are
        self.solver_, self.solver_reason_ = self.choose_solver(M.shape[1])
        solvers = {
            SolverName.NORMAL: self._fit_normal,
            SolverName.CG: self._fit_cg,
            SolverName.GD: self._fit_gd,
            SolverName.DUHL: self._fit_duhl,
        }
        with M.backend.hot_loop():
            solvers[self.solver_](M, y)
        if warn:
            warn_if_not_converged(self)
        return self

    def _final_loss(self, M: Any, y: Any, coef: np.ndarray) -> list[float]:
        """The objective at the solution: (||X w + b - y||^2 + alpha ||w||^2) / n, one pass."""
        n = M.shape[0]
        _, _, squares = M.reduce_rows(_squared_error, (y,), (M.backend.asarray(coef), self.intercept_))
        return [squares / n + self.alpha * float(coef @ coef) / n]

    def _fit_normal(self, M: Any, y: Any) -> None:
        n, d = M.shape
        # One pass for the sufficient statistics (a streamed matrix reads its data once for them).
        gram, xty, colsums, y_sum = (to_host(a) for a in M.reduce_rows(_normal_statistics, (y,)))
        lost_digits = 0.0
        if self.fit_intercept:  # center in the Gram matrix instead of in X
            means, y_mean = colsums / n, y_sum / n
            uncentered = np.diag(gram).copy()
            gram = gram - n * np.outer(means, means)
            xty = xty - n * means * y_mean
            # A column far from 0 beside its spread (values near 1e9 that vary by 1e3) loses digits here.
            spread = np.diag(gram)
            lost_digits = float(np.log10(np.max(uncentered / np.where(spread > 0, spread, np.inf), initial=1.0)))
        gram[np.diag_indices(d)] += self.alpha  # ridge: ||y - Xw - b||^2 + alpha ||w||^2
        check_finite(gram, "X^T X")
        solve = normal_equations_solver(gram)
        coef = solve(xty)
        if lost_digits > LOST_DIGITS_REFINED:
            coef = self._refine(M, y, solve, coef, means, float(y_mean))
        self.coef_ = coef
        self.intercept_ = float(y_mean - means @ coef) if self.fit_intercept else 0.0
        self.n_iter_ = 1
        self.loss_curve_ = self._final_loss(M, y, coef)

    def _refine(self, M: Any, y: Any, solve: Any, coef: np.ndarray, means: np.ndarray, y_mean: float) -> Any:
        """``coef`` refined against the normal equations' residual computed on centered rows (iterative refinement,
        ``solve``, the centered Gram matrix that lost digits, as the preconditioner): each step one pass, at most
        :data:`REFINEMENTS`, until a step changes ``coef`` by less than 1e-13 of its norm."""
        mu = M.backend.asarray(means, dtype=M.dtype)
        xtb, b_sum, _ = M.reduce_rows(_centered_target, (y,), (y_mean,))  # X^T (y - mean), centered per row
        target = to_host(xtb - mu * b_sum)
        for _ in range(REFINEMENTS):
            normal = to_host(self._centered_normal_product(M, mu, M.backend.asarray(coef, dtype=M.dtype))[0])
            step = solve(target - normal)
            coef = coef + step
            if float(np.linalg.norm(step)) <= 1e-13 * float(np.linalg.norm(coef)):
                break
        return coef

    def _centered_normal_product(self, M: Any, mu: Any, p: Any, y: Any = None, y_mean: float = 0.0) -> tuple:
        """A^T A p + alpha p and ||A p||^2 in one pass, A the centered X (q = A p = X p - (mu . p) 1); given the
        target ``y``, also (A p) . (y - ``y_mean``)."""
        found = M.reduce_rows(_normal_product, () if y is None else (y,), (p, float(mu @ p), y_mean))
        xtq, q_sum, q_squares = found[:3]
        return (xtq - mu * q_sum + self.alpha * p, q_squares, *found[3:])

    def _fit_duhl(self, M: Any, y: Any) -> None:
        """Ridge in the dual (lambda = alpha / n), centered: the intercept exact and unpenalized."""
        fit = fit_duhl(self, "linear_regression", M, y, "squared", center=self.fit_intercept)
        self.coef_, self.intercept_ = fit.coef_, fit.intercept_
        self.loss_curve_ = self._final_loss(M, y, fit.coef_)

    def _fit_cg(self, M: Any, y: Any) -> None:
        """Preconditioned conjugate gradients on (A^T A + alpha I) w = A^T b, A = X centered, b = y centered.

        Centering stays implicit (A p = X p - (mu . p) 1, A^T q = X^T q - mu sum(q)), so sparse and
        factorized X stay as they are. The Jacobi preconditioner is the factorized diagonal of A^T A
        (for a one-hot column, its count): each iteration costs one ``X @ p`` and one ``X.T @ q``.
        """
        xp = M.backend.xp
        n, d = M.shape
        y_mean = self._y_mean if self.fit_intercept else 0.0
        mu = M.colsums() / n if self.fit_intercept else xp.zeros(d, dtype=M.dtype)
        # b = y - mean(y), centered row by row inside the pass: X^T b, sum(b) and ||b||^2 in one read.
        xtb, b_sum, b_squares = M.reduce_rows(_centered_target, (y,), (y_mean,))
        diagonal = M.column_norms_squared() - n * mu * mu + self.alpha
        inverse_diagonal = xp.where(diagonal > 0, 1.0 / xp.maximum(diagonal, 1e-300), 0.0)  # constant columns: 0

        def normal_product(p: Any, with_y: bool = False) -> tuple:
            """A^T A p + alpha p and ||A p||^2 (and (A p) . b) in one pass: q = A p = X p - (mu . p) 1."""
            return self._centered_normal_product(M, mu, p, y if with_y else None, y_mean)

        w = xp.zeros(d, dtype=M.dtype)
        r = xtb - mu * b_sum
        target = self.tol * float(xp.linalg.norm(r))  # relative to the cold start's residual, warm or not
        losses: list[float] = [b_squares / n]
        start = getattr(self, "_coef_init", None)
        if start is not None:
            start = np.asarray(start, dtype=float).ravel()
            if start.shape != (d,) or not np.isfinite(start).all():
                raise ValueError(f"coef_init must hold {d} finite numbers (one per column), got shape {start.shape}.")
            w = M.backend.asarray(start, dtype=M.dtype)
            normal_w, q_squares, q_dot_b = normal_product(w, with_y=True)
            r = r - normal_w
            losses = [(q_squares - 2 * q_dot_b + b_squares + self.alpha * float(w @ w)) / n]
        z = inverse_diagonal * r
        p, rz = z, float(r @ z)
        it, converged = 0, float(xp.linalg.norm(r)) <= target  # the start may already solve it
        with progress(self.max_iter, "linear regression (cg)") as bar:
            while not converged and it < self.max_iter:
                it += 1
                normal_p, q_squares = normal_product(p)
                curvature = q_squares + self.alpha * float(p @ p)
                if curvature <= 0:
                    break  # p lies in the null space: nothing left to reduce
                step = rz / curvature
                w = w + step * p
                r = r - step * normal_p
                # A CG step lowers ||A w - b||^2 + alpha ||w||^2 by step * (r . z): no extra pass over X.
                losses.append(losses[-1] - step * rz / n)
                check_finite(float(r @ r), "the residual")
                converged = float(xp.linalg.norm(r)) <= target
                z = inverse_diagonal * r
                rz_next = float(r @ z)
                p, rz = z + (rz_next / rz) * p, rz_next
                bar.update()
        coef = to_host(w)
        self.coef_ = coef
        self.intercept_ = float(y_mean - float(to_host(mu) @ coef)) if self.fit_intercept else 0.0
        self.n_iter_ = it
        self.loss_curve_ = self._final_loss(M, y, coef)
        if not converged:
            record_not_converged(self, "linear regression (cg)", self.max_iter)

    def _fit_gd(self, M: Any, y: Any) -> None:
        xp = M.backend.xp
        n, d = M.shape
        lipschitz = _largest_eigenvalue(M, self.fit_intercept) / n + self.alpha / n
        step = 1.0 / lipschitz
        w, c = xp.zeros(d, dtype=M.dtype), 0.0
        w_prev, c_prev, momentum = w, c, 1.0
        losses: list[float] = []
        converged = False
        with progress(self.max_iter, "linear regression (gd)") as bar:
            for it in range(1, self.max_iter + 1):
                # Nesterov's accelerated gradient on 1/2n ||Xw + c - y||^2 + alpha/2n ||w||^2.
                next_momentum = (1 + np.sqrt(1 + 4 * momentum**2)) / 2
                beta = (momentum - 1) / next_momentum
                vw, vc = w + beta * (w - w_prev), c + beta * (c - c_prev)
                xtr, residual_sum, _ = M.reduce_rows(_squared_error, (y,), (vw, vc))
                grad_w = (xtr + self.alpha * vw) / n
                grad_c = residual_sum / n if self.fit_intercept else 0.0
                w_prev, c_prev, momentum = w, c, next_momentum
                w, c = vw - step * grad_w, vc - step * grad_c
                squares = M.reduce_rows(_squared_error, (y,), (w, c))[2]
                loss = squares / (2 * n) + self.alpha * float(to_host(w @ w)) / (2 * n)
                check_finite(loss, "the loss")
                if losses and loss > losses[-1]:
                    momentum = 1.0  # restart when the momentum overshoots
                losses.append(loss)
                bar.update()
                if it > 1 and abs(losses[-2] - loss) <= self.tol * max(abs(loss), 1e-300):
                    converged = True
                    break
        self.coef_, self.intercept_ = to_host(w), float(c)
        self.n_iter_, self.loss_curve_ = it, losses
        if not converged:
            record_not_converged(self, "linear regression (gd)", self.max_iter)

    def predict(self, X: Any) -> np.ndarray:
        """``X @ coef_ + intercept_`` (a factorized LMM on a normalized matrix)."""
        return to_host(self._decision(X))

    # -- what the pipeline asks (models/algorithm.py) ------------------------------------------------------

    metrics = Metrics.REGRESSION

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        return regression_metrics(self, X, y)

    def takes_start(self, n_columns: int, y: Any) -> bool:
        """Ridge by conjugate gradients (alpha > 0, tol > 0): one optimum, which CG reaches from any start to
        within ``tol`` (the normal equations and DuHL's dual take no start)."""
        if not (self.alpha > 0 and self.tol > 0):
            return False
        return (self.solver if self.solver != AUTO else self.choose_solver(n_columns)[0]) == SolverName.CG

    def start_arguments(self, coef: np.ndarray, intercept: float) -> dict[str, Any]:
        return {"coef_init": coef}


def _largest_eigenvalue(M: Any, intercept: bool, iterations: int = 50) -> float:
    """Largest eigenvalue of [X 1]^T [X 1] by power iteration on factorized products."""
    xp = M.backend.xp
    d = M.shape[1]
    v = xp.ones(d + intercept, dtype=M.dtype) / np.sqrt(d + intercept)
    value = 1.0
    for _ in range(iterations):
        # z = X v + v_d 1; u = [X^T z, sum(z)]: one pass.
        u, z_sum, _ = M.reduce_rows(_normal_product, (), (v[:d], -float(v[d]) if intercept else 0.0, 0.0))
        if intercept:
            u = xp.concatenate([u, xp.asarray([z_sum], dtype=M.dtype)])
        value = float(xp.linalg.norm(u))
        if value == 0:
            return 1.0
        v = u / value
    return value * 1.01


class LogisticRegression(HostTargetScoreMixin, ClassifierMixin, _LinearModel):
    """Binary logistic regression with L2 penalty, scikit-learn's objective, factorized.

    Minimizes ``0.5 ||w||^2 + C sum_i log(1 + exp(-s_i (x_i w + b)))`` with
    s_i = +-1 (no penalty with ``penalty=None``), as scikit-learn does.

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularization strength.
    penalty : {"l2", None}, default="l2"
        The L2 penalty ``0.5 ||w||^2`` (the intercept not penalized), or none.
    fit_intercept : bool, default=True
        Fit an intercept; no column of ones is ever built.
    solver : {"lbfgs", "newton", "duhl"}, default="lbfgs"
        ``"lbfgs"``: scipy's L-BFGS over factorized gradients ``X.T @ r``.
        ``"newton"``: Newton steps with the factorized Hessian ``X^T D X``. ``"duhl"``: dual coordinate
        descent over row partitions (``ilargi_db.models.duhl``), stopping at ``tol`` times the starting
        duality gap (``duality_gap_``); its intercept is liblinear's (below), so the model is scikit-learn's
        ``LogisticRegression(solver="liblinear")``, not the lbfgs one's.
        ``"newton"`` forms a dense d x d matrix and refuses above ``max_gram_bytes``.
    max_iter : int, default=100
        Reaching it warns (``ConvergenceWarning``).
    intercept_scaling : float, default=1.0
        ``"duhl"`` only: the intercept is the weight of a constant column of this value, penalized like the
        others (scikit-learn's liblinear); a larger one penalizes it less.
    tol : float, default=1e-4
        Stop when the largest entry of the projected gradient of scikit-learn's objective (mean
        log-loss + ||w||^2 / 2Cn) falls below it: scikit-learn's own criterion and default.
    max_gram_bytes : int, default=256 MiB
        The largest dense d x d matrix ``"newton"`` may form.

    Attributes
    ----------
    classes_ : ndarray of shape (2,) or (n_classes,)
        More than two classes fit scikit-learn's multinomial model (softmax cross-entropy, ``solver="lbfgs"``
        only; ``ilargi_db.models._multinomial``).
    coef_ : ndarray of shape (n_features,), or (n_classes, n_features) for more than two classes
    intercept_ : float, or ndarray of shape (n_classes,) for more than two classes
    n_iter_ : int
    loss_curve_ : list of float
        Mean log-loss after each iteration.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> LogisticRegression().fit(X, [0, 0, 1, 1]).predict([[0.5], [2.5]])
    array([0, 1])
    """

    _parameter_constraints: dict = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "penalty": [StrOptions({"l2"}), None],
        "fit_intercept": ["boolean"],
        "solver": [StrOptions(set(CATALOG["logistic_regression"].solver_names))],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_gram_bytes": [Interval(Integral, 0, None, closed="left")],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        C: float = 1.0,
        penalty: str | None = "l2",
        fit_intercept: bool = True,
        solver: str = "lbfgs",
        max_iter: int = 100,
        tol: float = 1e-4,
        max_gram_bytes: int = MAX_GRAM_BYTES,
        intercept_scaling: float = 1.0,
    ):
        self.C = C
        self.intercept_scaling = intercept_scaling
        self.penalty = penalty
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.max_gram_bytes = max_gram_bytes

    def fit(
        self, X: Any, y: Any, coef_init: Any = None, intercept_init: float | None = None, *, warn: bool = True
    ) -> LogisticRegression:
        """Fit on a NormalizedMatrix (factorized) or an array/sparse matrix.

        ``coef_init`` and ``intercept_init`` warm-start the solver (the objective is convex: the same optimum,
        often in fewer iterations). ``warn=False`` keeps a stop at ``max_iter`` in ``convergence_warning_``
        only, for a caller that tells of it itself.
        """
        self._validate_params()
        self._start = (coef_init, intercept_init)
        self.convergence_warning_ = None
        X, y_host = check_input(self, X, y, reset=True)
        self.classes_ = logistic_classes(y_host, self.solver)
        M = as_matrix(X)
        if len(self.classes_) > 2:
            with M.backend.hot_loop():
                fit_multinomial(self, M, y_host, self._start)
            if warn:
                warn_if_not_converged(self)
            return self
        y01 = M.keep_rows(M.backend.asarray((y_host == self.classes_[1]).astype(float), dtype=M.dtype))
        solvers = {
            SolverName.LBFGS: self._fit_lbfgs,
            SolverName.NEWTON: self._fit_newton,
            SolverName.DUHL: self._fit_duhl,
        }
        with M.backend.hot_loop():
            solvers[self.solver](M, y01)
        if warn:
            warn_if_not_converged(self)
        return self

    def _intercept(self, params: np.ndarray, d: int) -> float:
        return float(params[d]) if self.fit_intercept else 0.0

    def objective(self, M: Any, y01: Any, params: np.ndarray) -> tuple[float, np.ndarray, float]:
        """scikit-learn's objective (mean log-loss + ||w||^2 / 2Cn), its gradient, and the mean log-loss.

        What the solvers minimize at ``params`` (the coefficients, then the intercept when ``fit_intercept``)
        over ``M`` with labels ``y01`` (1.0 where the label is ``classes_[1]``, as ``M.keep_rows`` keeps them):
        one pass over the rows per call (:func:`_logistic`), so timing the calls times the passes.
        """
        n, d = M.shape
        w = M.backend.asarray(params[:d])
        loss, xtr, residual_sum = M.reduce_rows(_logistic, (y01,), (w, self._intercept(params, d)))
        strength = 1.0 / (self.C * n) if self.penalty == "l2" else 0.0
        grad = np.empty_like(params)
        grad[:d] = to_host(xtr) / n + strength * params[:d]
        if self.fit_intercept:
            grad[d] = residual_sum / n
        value = loss / n + 0.5 * strength * float(params[:d] @ params[:d])
        return value, grad, loss / n

    def _fit_lbfgs(self, M: Any, y01: Any) -> None:
        d = M.shape[1]
        objective = lambda params: self.objective(M, y01, params)  # noqa: E731
        result, losses = minimize_lbfgs(objective, self._initial_params(d), self, "logistic regression (lbfgs)")
        self._set(result.x, d, int(result.nit), losses)

    def _fit_duhl(self, M: Any, y01: Any) -> None:
        """In the dual (lambda = 1 / (C n)), labels -1 and 1, the intercept a penalized constant column."""
        signs = 2.0 * host_rows(y01) - 1.0
        fit = fit_duhl(
            self,
            "logistic_regression",
            M,
            signs,
            "logistic",
            intercept_scaling=self.fit_intercept * self.intercept_scaling,
        )
        params = np.append(fit.coef_, fit.intercept_) if self.fit_intercept else fit.coef_
        self._set(params, M.shape[1], self.n_iter_, [self.objective(M, y01, params)[2]])

    def _fit_newton(self, M: Any, y01: Any) -> None:
        n, d = M.shape
        check_gram_size(d + self.fit_intercept, self.max_gram_bytes, 'solver="newton"')
        params = self._initial_params(d)
        strength = 1.0 / (self.C * n) if self.penalty == "l2" else 0.0
        losses: list[float] = []
        converged = False
        with progress(self.max_iter, "logistic regression (newton)") as bar:
            for _ in range(self.max_iter):
                value, grad, mean_loss = self.objective(M, y01, params)
                check_finite(value, "the log-loss")
                losses.append(mean_loss)
                bar.update()
                if np.max(np.abs(grad)) <= self.tol:
                    converged = True
                    break
                w = M.backend.asarray(params[:d])
                xtdx, xtd, d_sum = M.reduce_rows(_logistic_curvature, (y01,), (w, self._intercept(params, d)))
                hessian = np.empty((d + self.fit_intercept,) * 2)  # of the objective: X^T D X / n + strength I
                hessian[:d, :d] = to_host(xtdx) / n
                hessian[np.diag_indices(d)] += strength
                if self.fit_intercept:
                    col = to_host(xtd) / n
                    hessian[:d, d] = hessian[d, :d] = col
                    hessian[d, d] = d_sum / n
                step = scipy.linalg.lstsq(hessian, grad, lapack_driver="gelsd")[0]
                # Backtracking keeps Newton safe far from the optimum.
                t = 1.0
                while t > 1e-8 and self.objective(M, y01, params - t * step)[0] > value - 1e-4 * t * grad @ step:
                    t /= 2
                params = params - t * step
        self._set(params, d, len(losses), losses)
        if not converged:
            record_not_converged(self, "logistic regression (newton)", self.max_iter)

    def _initial_params(self, d: int) -> np.ndarray:
        """Zeros, or the warm start ``fit`` was given (checked against the data's width)."""
        params = np.zeros(d + self.fit_intercept)
        coef, intercept = getattr(self, "_start", (None, None))
        if coef is not None:
            coef = np.asarray(coef, dtype=float).ravel()
            if coef.shape != (d,) or not np.isfinite(coef).all():
                raise ValueError(f"coef_init must hold {d} finite numbers (one per column), got shape {coef.shape}.")
            params[:d] = coef
        if intercept is not None and self.fit_intercept:
            params[d] = float(intercept)
        return params

    def _set(self, params: np.ndarray, d: int, n_iter: int, losses: list[float]) -> None:
        self.coef_ = params[:d].copy()
        self.intercept_ = float(params[d]) if self.fit_intercept else 0.0
        self.n_iter_ = n_iter
        self.loss_curve_ = losses

    # -- what the pipeline asks (models/algorithm.py) ------------------------------------------------------

    metrics = Metrics.CLASSIFICATION

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        return log_loss_metrics(self, X, y)

    def takes_start(self, n_columns: int, y: Any) -> bool:
        """L2-penalized (one optimum) with ``tol`` > 0, by a primal solver (DuHL's dual starts at alpha = 0), on
        two classes: an earlier (binary) model's coefficients cannot start a multinomial fit."""
        primal = self.solver != SolverName.DUHL and self.penalty == "l2" and self.tol > 0
        return primal and len(np.unique(to_host(y))) <= 2

    def start_arguments(self, coef: np.ndarray, intercept: float) -> dict[str, Any]:
        return {"coef_init": coef, "intercept_init": intercept}

    def decision_function(self, X: Any) -> np.ndarray:
        return to_host(self._decision(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probabilities of each of ``classes_`` (the softmax of the k scores when there are k > 2)."""
        z = to_host(self._decision(X))
        if z.ndim == 2:  # k > 2 classes: k scores a row
            return softmax(z)
        p = 0.5 * (1.0 + np.tanh(0.5 * z))
        return np.stack([1 - p, p], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        z = to_host(self._decision(X))
        if z.ndim == 2:
            return self.classes_[np.argmax(z, axis=1)]
        return self.classes_[(z > 0).astype(int)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = self.solver in MULTINOMIAL_SOLVERS
        return tags
