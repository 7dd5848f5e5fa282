"""The whole-job model as a scikit-learn estimator (``get_params``, ``set_params``,
``clone``): :class:`models.whole_job.WholeJobFit` with ``BaseEstimator``. Kept apart so the
forecast path, which fits the model per request, never imports scikit-learn."""

from __future__ import annotations

from sklearn.base import BaseEstimator

from models.whole_job import WholeJobFit


class WholeJobModel(BaseEstimator, WholeJobFit):
    """Per (job key, deployment) wall-time model with a trend and an interval
    (``models.whole_job``'s rules), as a scikit-learn estimator."""


__all__ = ["WholeJobModel"]
