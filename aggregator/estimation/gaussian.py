"""LDP Gaussian Naive Bayes: per-class means and variances from class-hiding reports (section 3.2).

Every non-class report is a class-hiding vector (the value, or its square, at the person's class
position, zeros elsewhere) with noise. The mean of such reports over a group estimates
``P(C_j)·μ_j`` at position ``j``, so the aggregator divides by the estimated ``P(C_j)``. The
variance is ``E[x²] - E[x]²`` from the two disjoint groups; a non-positive variance (common when
noise dominates) is raised to :data:`VARIANCE_FLOOR`, in the prepared units where every coordinate
lies in [-1, 1].
"""

from __future__ import annotations

from functools import partial

import numpy as np

from participant.encoding import feature_rows
from participant.spec import CollectionSpec

from .simplex import project_to_simplex
from .statistics import CollectionStatistics

# The least class variance a model keeps, on the prepared range [-1, 1] (whose largest variance is 1):
# a bound on a density's height, so that no single coordinate's likelihood is unbounded.
VARIANCE_FLOOR = 1e-3


class GaussianModel:
    """Gaussian Naive Bayes over the spec's prepared coordinates.

    ``class_prior`` has shape ``(k,)``; ``theta`` and ``var`` (means and variances per class and
    coordinate) have shape ``(k, r)``, as scikit-learn's ``GaussianNB`` holds them. ``var`` is the
    predictive variance the model classifies with, not an estimate of the class's variance: for
    reading, ``variance_estimate`` and ``variance_se`` (shape ``(k, r)``, or None) hold an
    estimate of each class's variance in prepared units, corrected to second order for the noise
    (it can be negative where the noise is larger than the variance), and its standard error
    (:func:`reported_variances`).
    """

    def __init__(self, spec: CollectionSpec, class_prior, theta, var, variance_estimate=None, variance_se=None):
        self.spec = spec
        self.classes_ = np.asarray(spec.classes, dtype=object)
        self.class_prior = np.asarray(class_prior, dtype=float)
        self.theta = np.asarray(theta, dtype=float)
        self.var = np.asarray(var, dtype=float)
        self.variance_estimate = None if variance_estimate is None else np.asarray(variance_estimate, dtype=float)
        self.variance_se = None if variance_se is None else np.asarray(variance_se, dtype=float)
        if (self.class_prior <= 0).any() or (self.var <= 0).any():
            raise ValueError("class priors and variances must be positive")

    def joint_log_likelihood_prepared(self, Z: np.ndarray) -> np.ndarray:
        """``log P(c) + Σ_i log N(z_i; θ_ci, σ²_ci)`` for prepared coordinates; shape ``(m, k)``."""
        quad = ((Z[:, None, :] - self.theta[None]) ** 2 / self.var[None]).sum(axis=2)
        norm = np.log(2 * np.pi * self.var).sum(axis=1)
        return np.log(self.class_prior) - 0.5 * (norm[None] + quad)

    def _jll(self, X) -> np.ndarray:
        """Of raw records ``X``: a DataFrame, a list of dicts or rows in spec order (as a pipeline takes them)."""
        return self.joint_log_likelihood_prepared(self.spec.continuous.transform(feature_rows(X, self.spec)))

    def predict_log_proba(self, X) -> np.ndarray:
        jll = self._jll(X)
        from scipy.special import logsumexp  # here: importing the estimators must not load scipy

        return jll - logsumexp(jll, axis=1, keepdims=True)

    def predict_proba(self, X) -> np.ndarray:
        """Posterior class probabilities of raw records, shape ``(m, k)``."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        """The most probable class label of each raw record; shape ``(m,)``."""
        return self.classes_[np.argmax(self._jll(X), axis=1)]

    def score(self, X, y) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y, dtype=object)))

    def to_sklearn(self):
        """A fitted ``GaussianNB`` over the prepared coordinates (see :meth:`to_sklearn_pipeline`)."""
        from sklearn.naive_bayes import GaussianNB

        nb = GaussianNB(priors=self.class_prior)
        nb.classes_ = np.asarray(self.spec.classes)
        nb.n_features_in_ = self.theta.shape[1]
        nb.class_prior_ = self.class_prior.copy()
        nb.class_count_ = self.class_prior.copy()
        nb.theta_ = self.theta.copy()
        nb.var_ = self.var.copy()
        nb.epsilon_ = 0.0
        return nb

    def to_sklearn_pipeline(self):
        """The spec's preparation (clip, normalise, project) then :meth:`to_sklearn`: takes raw
        records as a DataFrame with the spec's feature names, a list of dicts, or rows in spec
        order (:func:`participant.encoding.feature_rows`)."""
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import FunctionTransformer

        rows = FunctionTransformer(partial(feature_rows, spec=self.spec))
        prepare = FunctionTransformer(self.spec.continuous.transform)
        return Pipeline([("rows", rows), ("prepare", prepare), ("nb", self.to_sklearn())])

    def to_dict(self) -> dict:
        """The model as JSON: ``var`` the predictive variances it classifies with, and, where
        estimated, ``variance_estimate`` and ``variance_se`` (see the class)."""
        out = {
            "spec": self.spec.to_dict(),
            "classes": list(self.spec.classes),
            "class_prior": self.class_prior.tolist(),
            "theta": self.theta.tolist(),
            "var": self.var.tolist(),
        }
        if self.variance_estimate is not None:
            out["variance_estimate"] = self.variance_estimate.tolist()
            out["variance_se"] = self.variance_se.tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> GaussianModel:
        return cls(
            CollectionSpec.from_dict(data["spec"]), data["class_prior"], data["theta"], data["var"],
            data.get("variance_estimate"), data.get("variance_se"),
        )  # fmt: skip


def class_prior(stats: CollectionStatistics, estimator: str) -> np.ndarray:
    """``P(C_j)`` from the class input: ``paper`` sets non-positive counts to 1 and normalises;
    ``normsub`` projects the estimated proportions onto the simplex (floored at 1e-3)."""
    state = stats.states[0]
    counts = stats.spec.oracles[0].estimate(state)
    if estimator == "paper":
        counts = np.where(counts > 0, counts, 1.0)
        return counts / counts.sum()
    if state.n == 0:
        return np.full(len(counts), 1.0 / len(counts))
    prior = np.maximum(project_to_simplex(counts / state.n, 1.0), 1e-3)
    return prior / prior.sum()


def gaussian_estimator(stats: CollectionStatistics, estimator: str = "normsub") -> GaussianModel:
    """Means and variances per class and coordinate.

    ``paper``: the plug-in ``σ̂² = Ê[z²]/P̂ − θ̂²``, floored at :data:`VARIANCE_FLOOR`.
    ``normsub`` (default): means clipped to [-1, 1] and mean squares to [0, 1] (the ranges
    prepared values cannot leave); the variance corrected for the bias of ``θ̂²``
    (:func:`corrected_variances`), shrunk toward the classes' pooled variance by an
    empirical-Bayes weight that vanishes with its standard error (:func:`shrunk_toward_pooled`),
    then widened by the mean's own variance ``Var(θ̂)``: the model's variance is the predictive
    one, of a value about a mean known only to within its noise. The widening vanishes with the
    reports as the bias of the shrinkage does; without it, a class whose variance the noise drew
    near zero became a spike that decided every prediction (0.557 against 0.726 on Australian at
    ε = 4; research notes, *Gaussian class variances*). Kept within [:data:`VARIANCE_FLOOR`, 1].
    """
    spec = stats.spec
    prior = class_prior(stats, estimator)
    theta, mean_square = class_moments(stats, prior)
    first, second = np.clip(theta, -1.0, 1.0), np.clip(mean_square, 0.0, 1.0)  # the ranges they cannot leave
    var_theta, var_square = moment_variances(stats, prior, first, second)
    # For reading: the estimate from the unclipped moments (clipping θ̂ and Ê[z²] to their ranges
    # biases it where a variance is small beside the noise), with the class prior's noise.
    estimate, estimate_se = reported_variances(stats, prior, theta, mean_square, var_theta, var_square)
    if estimator == "paper":
        var = np.maximum(mean_square - theta**2, VARIANCE_FLOOR)
        return GaussianModel(spec, prior, theta, var, estimate, estimate_se)
    var, se = corrected_variances(stats, prior, first, second, var_theta, var_square)
    var = np.clip(shrunk_toward_pooled(var, se, prior), VARIANCE_FLOOR, 1.0)
    return GaussianModel(spec, prior, first, np.clip(var + var_theta, VARIANCE_FLOOR, 1.0), estimate, estimate_se)


def shrunk_toward_pooled(var: np.ndarray, se: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Each class's variance (shape ``(k, r)``, corrected for the squared mean's bias, standard
    errors ``se``) moved toward the coordinate's pooled variance ``Σ_c π_c·σ²_c`` (``prior`` shape ``(k,)``) by the
    empirical-Bayes weight ``w = se² / (se² + τ²)``: ``τ²`` is how far the class's variance lies
    from the pooled one beyond its noise (the squared difference less ``se²``, at least 0: the
    positive-part estimate, class by class, so that a class whose variance is measured keeps it
    whatever the others' noise).

    Where a class's variance cannot be told from the pooled one (``se ≫ τ``) it takes the pooled
    one, as a model needs; as reports grow ``se`` falls and the weight with it, so the bias
    ``w·(pooled − σ²)`` vanishes: at most about ``se/2`` where ``τ`` is the true spread (the largest
    of ``se²·|Δ|/(se² + Δ²)``). A substitution of the pooled variance wherever a variance was below
    twice its standard error, as before, biased a minority class seven times below the pooled
    variance by +476 % at 10^5 people and ε = 4 (4.8 standard errors; ``tests/test_gaussian.py``)."""
    pooled = (prior[:, None] * var).sum(axis=0, keepdims=True)
    spread = np.maximum((var - pooled) ** 2 - se**2, 0.0)
    weight = se**2 / np.maximum(se**2 + spread, 1e-300)
    return weight * pooled + (1 - weight) * var


def class_moments(stats: CollectionStatistics, prior) -> tuple[np.ndarray, np.ndarray]:
    """``(θ̂, Ê[z²|c])`` per class and coordinate, shape ``(k, r)`` each, in prepared units: the
    class-hiding reports' means (``P(C_j)·E[z | C_j]`` and ``P(C_j)·E[z² | C_j]``) over the class
    prior ``prior`` (shape ``(k,)``). Unclipped: they can leave [-1, 1] and [0, 1]."""
    spec = stats.spec
    k, r = spec.n_classes, len(spec.continuous.output_names)
    estimates = [oracle.estimate(state) for oracle, state in zip(spec.oracles, stats.states)]
    if spec.approach == 3:
        first = np.array(estimates[1::2]).T
        second = np.array(estimates[2::2]).T
    else:
        first, second = estimates[1].reshape(r, k).T, estimates[2].reshape(r, k).T
    return first / prior[:, None], second / prior[:, None]


def class_means_and_noise(stats: CollectionStatistics) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(prior, θ̂, Var θ̂)``: ``normsub``'s class prior (shape ``(k,)``), the unclipped class
    means (shape ``(k, r)``, prepared units) and each mean's estimated variance
    (:func:`moment_variances` at the means and mean squares clipped to their ranges)."""
    prior = class_prior(stats, "normsub")
    theta, mean_square = class_moments(stats, prior)
    variance, _ = moment_variances(stats, prior, np.clip(theta, -1.0, 1.0), np.clip(mean_square, 0.0, 1.0))
    return prior, theta, variance


def corrected_variances(
    stats: CollectionStatistics, prior, theta, mean_square, var_theta=None, var_square=None
) -> tuple[np.ndarray, np.ndarray]:
    """``(variance, standard error)`` per class and coordinate, shape ``(k, r)`` each: the plug-in
    ``Ê[z²] − θ̂²`` plus ``Var(θ̂)``, by which ``θ̂²`` overestimates ``θ²`` on average; may be
    negative. Unbiased to first order in the class prior's noise (and up to the clipping of ``θ̂``
    and ``Ê[z²]`` to their ranges): ``Var(θ̂)``, estimated as the noise over ``P̂²``, is
    overstated by about ``1 + 3·Var(P̂)/P²``, which :func:`reported_variances` takes out; the
    standard error here is the first-order one, ``√(Var(Ê[z²]) + 4θ̂²·Var(θ̂))``.
    ``var_theta`` and ``var_square``: :func:`moment_variances`, if the caller has them."""
    if var_theta is None or var_square is None:
        var_theta, var_square = moment_variances(stats, prior, theta, mean_square)
    return mean_square - theta**2 + var_theta, np.sqrt(var_square + 4 * theta**2 * var_theta)


def reported_variances(
    stats: CollectionStatistics, prior, theta, mean_square, var_theta, var_square
) -> tuple[np.ndarray, np.ndarray]:
    """``(variance, standard error)`` per class and coordinate, shape ``(k, r)`` each, in prepared
    units, as reported for reading: ``Ê[z²] − θ̂²`` corrected to second order for the noise of
    ``θ̂`` and of the class prior ``P̂`` both are divided by, with its delta-method standard error.

    ``θ̂`` and ``Ê[z²]`` are sums over ``P̂``, which other people's reports estimate, of variance
    ``V`` (:func:`~aggregator.estimation.class_prior.sampled_covariance` at
    :func:`~aggregator.estimation.class_prior.variance_prior`, so that it does not collapse where
    few people report the class). The estimate adds back ``Var(θ̂)``, by which ``θ̂²``
    overestimates ``θ²``; that variance is estimated as the noise over ``P̂²``, which overstates
    it by ``1 + 3V/P²`` on average (``E[1/P̂²]``), so it is divided by that; and it takes out the
    bias ``(E[z²] − 3θ²)·V/P²`` that ``P̂``'s noise puts in the ratios. The standard error is
    ``√(Var(Ê[z²]) + 4θ²·Var(θ̂) + 2·Var(θ̂)² + ((2θ² − E[z²])/P)²·V)``: the squared mean's
    variance for a normal ``θ̂``, and the prior's noise to first order, with ``θ²`` estimated by
    ``θ̂² − Var(θ̂)`` (at least 0): ``θ̂²`` itself, larger by ``Var(θ̂)`` on average, made the
    error up to twice too wide where the noise exceeds the mean
    (``research/gaussian_calibration.py``). ``Var(θ̂)`` enters the error undivided by
    ``1 + 3V/P²``: where ``P̂`` lies near 0 that expansion fails, and the error must stay as wide
    as the ratio's noise. The estimate is not kept within [0, 1]: one outside says its
    collection's noise dominates, as its standard error does. ``var_theta`` and ``var_square``:
    :func:`moment_variances` at the moments clipped to their ranges."""
    from .class_prior import people_surveyed, sampled_covariance, variance_prior

    n = max(stats.states[0].n, 1)
    counted = variance_prior(prior, n)
    var_prior = np.diag(sampled_covariance(stats.spec.oracles[0], n, people_surveyed(stats), counted))[:, None]
    p = prior[:, None]
    relative = var_prior / p**2
    first, second = np.clip(theta, -1.0, 1.0), np.clip(mean_square, 0.0, 1.0)
    square = np.clip(theta**2 - var_theta, 0.0, 1.0)  # θ²'s estimate: θ̂² less its excess
    estimate = mean_square - theta**2 + var_theta / (1 + 3 * relative) - (second - 3 * first**2) * relative
    se = np.sqrt(var_square + 4 * square * var_theta + 2 * var_theta**2 + ((2 * square - second) / p) ** 2 * var_prior)
    return estimate, se


def moment_variances(stats: CollectionStatistics, prior, theta, mean_square) -> tuple[np.ndarray, np.ndarray]:
    """Estimated variances of ``θ̂`` and of ``Ê[z²|c]``, shape ``(k, r)`` each: the mean report's
    variance (the mechanism's noise, plus the spread of the class-hiding entries ``z·1[c]``, whose
    variance is ``P·E[z²] − P²θ²``), divided by ``P²``."""
    spec = stats.spec
    k, r = spec.n_classes, len(spec.continuous.output_names)
    p = prior[:, None]
    entry_first = np.maximum(p * mean_square - p**2 * theta**2, 0.0)
    entry_second = np.maximum(p * mean_square - p**2 * mean_square**2, 0.0)  # z⁴ <= z²
    if spec.approach == 3:
        pairs = [(spec.oracles[1 + 2 * i], stats.states[1 + 2 * i], spec.oracles[2 + 2 * i], stats.states[2 + 2 * i]) for i in range(r)]
        noise_first = np.array([o.variance(s.n) for o, s, _, _ in pairs]).T  # (k, r)
        noise_second = np.array([o.variance(s.n) for _, _, o, s in pairs]).T
        n_first = np.array([max(s.n, 1) for _, s, _, _ in pairs])[None, :]
        n_second = np.array([max(s.n, 1) for _, _, _, s in pairs])[None, :]
    else:
        first_oracle, second_oracle = spec.oracles[1], spec.oracles[2]
        noise_first = first_oracle.variance(stats.states[1].n).reshape(r, k).T
        noise_second = second_oracle.variance(stats.states[2].n).reshape(r, k).T
        n_first, n_second = max(stats.states[1].n, 1), max(stats.states[2].n, 1)
        if spec.approach == 2:  # the one-bit bound already covers the entries' spread
            entry_first = entry_second = 0.0
    var_theta = (noise_first + entry_first / n_first) / p**2
    var_square = (noise_second + entry_second / n_second) / p**2
    return var_theta, var_square
