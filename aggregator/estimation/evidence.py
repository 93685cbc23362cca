"""What a collection's reports can tell a model, for the people who read the model.

A private model can fall short of always predicting the most common class (documentation,
*Estimators*), and an operator has no labelled rows to find out. The reports say how sure the
class prior is: its standard errors, and how far the most common class leads the next (with a
lead of two standard errors or more the reports named the wrong class in 3 runs of 1,140 across
the paper's data sets and diabetes; below it, in up to 42 % of runs. A Gaussian collection's
class input alone, on Australian's even classes, named it wrongly in up to 40 % of the few runs
with such a lead: ``python research/evidence.py --model gaussian``). They also say whether the
features' dependence on the class is significant: a calibrated test per feature, of little power
at small ε, so no verdict on the model (``python research/evidence.py``). A Gaussian collection's
class counts come from its class input alone, and each prepared coordinate's class means are
tested for equality. Post-processing of the aggregated statistics: no privacy is spent.
"""

from __future__ import annotations

import numpy as np

from .class_prior import majority_lead, pooled_class_shares, reported_covariance
from .dependence import combined_p_value, exact_feature_p_values, gaussian_feature_p_values
from .simplex import project_to_simplex
from .statistics import CollectionStatistics

# A class no more common than the next leads it by two standard errors in about 2 % of collections.
SAFE_LEAD = 2.0
# The conventional level of the dependence test; the test's calibration there is measured in
# research/null_world.py (near 5 % of collections below it where no feature depends on the class).
DEPENDENCE_LEVEL = 0.05


def evidence(stats: CollectionStatistics) -> dict:
    """For a collection with class reports: ``class_prior`` and ``class_prior_standard_error``
    (per class name, shares of the people), ``majority_class``, ``majority_lead`` (how many
    standard errors of their difference the most common class's pooled share leads the next
    one's), ``feature_p_values`` (per feature name, the p-value of "this feature does not depend
    on the class", None where it has no reports), ``dependence_p_value`` (the features combined
    by Fisher's method) and ``summary``, sentences saying what these mean for the model. An empty
    dict without reports. Of the people's reports alone (:meth:`CollectionStatistics.people`).

    A Gaussian collection's class counts come from its class input alone; ``feature_p_values``
    holds, per prepared coordinate, the p-value of equal class means
    (:func:`~aggregator.estimation.dependence.gaussian_feature_p_values`), and
    ``class_mean_standard_error`` (per class name, one per prepared coordinate) says how noisy
    its class means are. Its lead matters more than a discrete model's: where it is small the
    model has to rely on its features, and where it is large but the coordinates are many and
    noisy the model can fall below always predicting that class (documentation, *The Gaussian model
    against the constant classifier*)."""
    spec = stats.spec
    stats = stats.people()
    pooled = pooled_class_shares(stats)
    if pooled is None:
        return {}
    prior = project_to_simplex(pooled.shares, 1.0)
    covariance = reported_covariance(stats, pooled, prior)
    top, second = np.argsort(-pooled.shares, kind="stable")[:2]
    lead = majority_lead(pooled.shares, covariance)
    if spec.model == "discrete":
        p_values = exact_feature_p_values(stats, prior * stats.n_reports)
        names = [f.name for f in spec.features]
    else:
        names = list(spec.continuous.output_names)
        p_values = gaussian_feature_p_values(stats)
    combined = combined_p_value(p_values)
    classes = spec.classes
    found = {
        "class_prior": dict(zip(classes, prior.tolist())),
        "class_prior_standard_error": dict(zip(classes, np.sqrt(np.diag(covariance)).tolist())),
        "majority_class": classes[top],
        "majority_lead": lead,
        "feature_p_values": dict(zip(names, p_values)),
        "dependence_p_value": combined,
        "summary": summary(classes[top], classes[second], lead, combined, any(p is not None for p in p_values)),
    }
    if spec.model == "gaussian":
        found["class_mean_standard_error"] = dict(zip(classes, class_mean_errors(stats).tolist()))
    return found


def class_mean_errors(stats: CollectionStatistics) -> np.ndarray:
    """The standard error of each class's estimated mean of each prepared coordinate, shape
    ``(k, r)``, in prepared units: the mechanism's noise and the class-hiding entries' spread
    over the reports, divided by the class prior the model uses
    (:func:`~aggregator.estimation.gaussian.moment_variances`; the prior's own noise is left out). Where it is
    as large as the spread of the means, the coordinate's class means are mostly noise."""
    from .gaussian import class_means_and_noise

    return np.sqrt(class_means_and_noise(stats)[2])


def summary(top: str, second: str, lead: float, p_value: float, tested: bool) -> str:
    """Two sentences: how sure the most common class is, and whether the features' dependence on
    the class is significant. Not significant is no verdict on the model: at small ε many weak
    dependences, none significant, still lift it well above the constant classifier where the
    classes are about even (chess and mushroom; ``python research/evidence.py``)."""
    sure = f"The reports make {top!r} the most common class, {lead:.1f} standard errors ahead of {second!r}"
    if lead >= SAFE_LEAD:
        sure += "."
    else:
        sure += (
            ": not a safe margin, another class may be the most common; more reports, or more of them on the "
            "class input, would settle it."
        )
    if not tested:
        return sure + " No feature could be tested for a dependence on the class."
    if p_value < DEPENDENCE_LEVEL:
        return f"{sure} The features depend on the class (p = {p_value:.2g})."
    return (
        f"{sure} No dependence of the features on the class is significant (p = {p_value:.2f}); "
        "many weak ones can still help the model."
    )
