"""What a fit that stopped at ``max_iter`` says, in one place (light: no scikit-learn import)."""

from __future__ import annotations

from ilargi_db.errors import spell

UNSCALED_ADVICE = f"raise max_iter, loosen tol, or standardize the features ({spell('standardize', True)})."
SCALED_ADVICE = "raise max_iter or loosen tol (the features were standardized already)."


def not_converged(what: str, max_iter: int) -> str:
    """The warning of a fit of ``what`` stopped at ``max_iter`` before converging."""
    return f"{what} stopped at max_iter={max_iter} before converging: {UNSCALED_ADVICE}"


def advice_after_standardizing(message: str) -> str:
    """A convergence warning of a fit on standardized features (the estimator saw a matrix, not the option): the
    advice to standardize left out."""
    return message.replace(UNSCALED_ADVICE, SCALED_ADVICE)


__all__ = ["SCALED_ADVICE", "UNSCALED_ADVICE", "advice_after_standardizing", "not_converged"]
