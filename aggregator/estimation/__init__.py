"""Estimation: from a collection's statistics to frequencies, means and the Naive Bayes model.

Holds the running statistics (:mod:`.statistics`), the estimators that turn them into a model
(:mod:`.estimators`: ``paper``, ``normsub``, ``ibu``), what those are built from (the simplex
projection, the count noise's variances, the class prior, the smoothing and its strength rule, the
Gaussian model, the temperature's calibration), and what the service reports beside a model
(:mod:`.evidence`, :mod:`.dependence`, :mod:`.plausibility`) or an operator plans with
(:mod:`.planning`, :mod:`.reduction`, :mod:`.sample`).

Imports: ``protocols`` and ``participant`` only; nothing of the service, the store or the
operator's command line, so a researcher can build models with no server installed.
"""
