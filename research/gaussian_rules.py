"""Rules that move the Gaussian model toward the constant classifier, and what each costs.

    python research/gaussian_rules.py [--reps 100] [--first-seed 0] [--eps 0.5,1,2,4] [--jobs 2]

On the original features the LDP Gaussian model often scores below the training split's majority
class (the guide *Continuous features*): each coordinate's class means are mostly noise, and summed
over 8 (Diabetes) or 14 (Australian) coordinates that noise outvotes the class prior. Each rule
post-processes the default (``normsub``) model from the aggregates alone; none is shipped:

- ``predictive variances``: each class's variance plus its mean's estimated variance, the
  Bayesian predictive density under a flat prior on the means (a coordinate drowned in noise
  then barely sways the model);
- ``posterior mean on the range``: each class mean the mean of its posterior under a flat prior
  on the prepared range [-1, 1] (a normal of the mean's estimated variance around the unclipped
  estimate, truncated to the range), in place of the clipped estimate;
- ``predictive on the range``: those posterior means, and each class's variance plus its mean's
  posterior variance (the predictive density under that prior, approximately);
- ``predictive on the range if the prior leads``: the same, only where the class input's most
  common class leads the next by two standard errors;
- ``posterior mean``: each coordinate's class means shrunk toward their precision-weighted mean by
  the empirical-Bayes weight ``τ²/(τ² + Var θ̂_c)``, ``τ²`` their spread less the noise's
  (method of moments, floored at 0);
- ``χ² gate``: every mean and variance replaced by the classes' pooled ones (the model then
  predicts the class prior's majority) when the χ² test of equal class means over all
  coordinates gives p > 0.05;
- ``gate if the prior leads``: the same, only where the class prior leads by two standard errors;
- ``weak coordinates``: each coordinate whose own χ² test gives p > 0.62 (|z| < 0.5 for two
  classes) gets the pooled mean and variance, so that it no longer sways the model;
- ``weak coordinates if the prior leads``: the same, only where the class prior leads by 1.5
  standard errors;
- ``prior shrunk``: the class prior moved toward even by its empirical-Bayes weight (the share of
  its deviation from even that the class input's noise explains), so that a prior the reports do
  not know outvotes nothing;
- ``James–Stein means, prior shrunk``: that prior, and every class mean moved toward the
  coordinate's precision-weighted centre by one positive-part James–Stein factor
  ``1 − (D − 2)/S`` over all ``D = r(k − 1)`` standardised deviations of the unclipped means
  (``S`` their sum of squares; only where ``D ≥ 3``);
- ``g-modelling means, prior shrunk``: that prior, and each standardised deviation (of the
  unclipped means) replaced by its posterior mean under a prior fitted to all of them (a
  symmetric distribution on a grid, fitted by EM: the nonparametric maximum likelihood of Koenker
  and Mizera), as issue 23 proposed for the discrete conditionals; only where ``D ≥ 3``;
- ``James–Stein evidence, prior shrunk``: that prior, and every coordinate's log-likelihood
  multiplied by the James–Stein factor instead of the means (the model tempered: variances over
  the factor, the prior tilted to keep the variances' normalising terms in proportion); where the
  factor is 0, the constant classifier of the unshrunk prior;
- ``the range and the prior spread-matched``: the posterior means on the range; where the model
  sums several coordinates, each class's variance plus its mean's posterior variance (the
  predictive density); the class prior's deviation from even kept at ``√(1 − w)``, ``w`` the
  share of it that the class input's noise explains (the spread-matched world of
  ``aggregator/strength.py``);
- ``expected log-likelihood on the range``: the posterior means on the range, and each class's
  log-likelihood its expectation over those posteriors, which charges a class
  ``Σ_i v_ci / 2σ²_ci`` for its means' posterior variances ``v`` (a tilt of the class prior): a
  class whose means the reports barely know is predicted less;
- ``predictive on the range where the means are lost``: ``predictive on the range`` only for the
  coordinates where some class mean's standard error exceeds 1, half the prepared range (its
  reports cannot place it within the range), the others as the default has them;
- ``the same, if the prior leads``: only where the class input's majority leads by two standard
  errors;
- ``the same, the prior shrunk if one is lost``: ``predictive on the range where the means are
  lost`` everywhere, and where some coordinate is lost the class prior of ``prior shrunk`` as
  well (the predictive over the prior too: a lost coordinate no longer sways the model, so an
  unsure prior must not decide alone);
- ``Wald gate if the prior leads``: the constant classifier (pooled means and variances) where
  the prior leads by two standard errors and the evidence's calibrated test of equal class means
  (:func:`aggregator.estimation.dependence.gaussian_feature_p_values`, Fisher-combined) gives p > 0.05.

Per (data set, approach, features, ε): the majority class's, ``prior only``'s (the class input's
majority) and ``normsub``'s test accuracy, ``normsub``'s paired difference with ``prior only``
(the constant classifier the reports give), and each rule's paired difference with ``normsub``
(± standard error) over seeds first, first + 1, … (the splits
and collections of ``bench/continuous.py``; projections fitted on the training split, as there).
Writes research/results/gaussian_rules.md (``--out``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from paired_runs import paired
from tqdm import tqdm

RESULTS = Path(__file__).with_name("results") / "gaussian_rules.md"
# (data set, approach, projection); with one component approaches 1 and 3 are one mechanism.
SETTINGS = [
    (name, approach, reduce)
    for name in ("australian", "diabetes")
    for reduce, approaches in ((None, (1, 2, 3)), ("pca", (1, 2)), ("dca", (1, 2)))
    for approach in approaches
]
RULES = (
    "predictive variances",
    "posterior mean on the range",
    "predictive on the range",
    "predictive on the range if the prior leads",
    "posterior mean",
    "χ² gate",
    "gate if the prior leads",
    "weak coordinates",
    "weak coordinates if the prior leads",
    "prior shrunk",
    "James–Stein means, prior shrunk",
    "g-modelling means, prior shrunk",
    "James–Stein evidence, prior shrunk",
    "the range and the prior spread-matched",
    "expected log-likelihood on the range",
    "predictive on the range where the means are lost",
    "the same, if the prior leads",
    "the same, the prior shrunk if one is lost",
    "Wald gate if the prior leads",
)
WEAK_P, WEAK_LEAD = 0.62, 1.5


def pooled_model(model, prior, columns=None):
    """``model`` with the class means and variances of ``columns`` (a boolean mask of shape
    ``(r,)``; every coordinate when None) replaced by their prior-weighted pools."""
    from aggregator.estimation.gaussian import GaussianModel

    theta, var = model.theta.copy(), model.var.copy()
    columns = np.ones(theta.shape[1], bool) if columns is None else columns
    theta[:, columns] = (prior[:, None] * theta).sum(axis=0)[columns]
    var[:, columns] = (prior[:, None] * var).sum(axis=0)[columns]
    return GaussianModel(model.spec, prior, theta, var)


def shrunk_prior(stats, prior: np.ndarray, spread_matched: bool = False) -> np.ndarray:
    """The class prior (shape ``(k,)``) moved toward even by the share ``w`` of its deviation from
    even that the class input's noise explains, floored at 1e-3: the deviation kept at ``1 − w``
    (the posterior mean) or, ``spread_matched``, at ``√(1 − w)``."""
    from aggregator.estimation.class_prior import input_covariance

    k = len(prior)
    deviation = prior - 1 / k
    noise = np.trace(input_covariance(stats.spec.oracles[0], max(stats.states[0].n, 1), prior)) * (1 - 1 / k)
    weight = min(1.0, noise / max((deviation**2).sum(), 1e-12))
    keep = np.sqrt(1 - weight) if spread_matched else 1 - weight
    shrunk = np.maximum(1 / k + keep * deviation, 1e-3)
    return shrunk / shrunk.sum()


def grid_posterior_means(z: np.ndarray, points: int = 121, steps: int = 500) -> np.ndarray:
    """Posterior means of ``μ`` given each ``z ~ N(μ, 1)`` (any shape), under the mixing
    distribution of ``±z`` fitted by EM on a grid of ``points`` values (its nonparametric maximum
    likelihood)."""
    data = np.concatenate([z.ravel(), -z.ravel()])
    grid = np.linspace(-np.abs(data).max() - 1, np.abs(data).max() + 1, points)
    likelihood = np.exp(-0.5 * (data[:, None] - grid[None]) ** 2)
    weights = np.full(points, 1 / points)
    for _ in range(steps):
        weights *= (likelihood / (likelihood @ weights)[:, None]).mean(axis=0)
    posterior = np.exp(-0.5 * (z.ravel()[:, None] - grid[None]) ** 2) * weights
    return (posterior @ grid / posterior.sum(axis=1)).reshape(z.shape)


def range_posterior(theta: np.ndarray, var_theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each class mean's posterior mean and variance (shapes as ``theta``'s) under a flat prior on
    the prepared range [-1, 1]: a normal of variance ``var_theta`` around the unclipped estimate
    ``theta``, truncated to the range."""
    from scipy.stats import truncnorm

    sd = np.sqrt(var_theta)
    low, high = (-1 - theta) / sd, (1 - theta) / sd
    return truncnorm.mean(low, high, loc=theta, scale=sd), truncnorm.var(low, high, loc=theta, scale=sd)


def apply_rule(rule: str, stats, model):
    """The model ``rule`` makes of the default ``model`` built from ``stats``."""
    from scipy.stats import chi2

    from aggregator.estimation.class_prior import input_covariance, majority_lead
    from aggregator.estimation.gaussian import GaussianModel, class_means_and_noise

    prior, theta, var_theta = class_means_and_noise(stats)  # the default model's prior: normsub's
    k = len(prior)
    centre = (model.theta / var_theta).sum(axis=0) / (1 / var_theta).sum(axis=0)
    statistic = ((model.theta - centre) ** 2 / var_theta).sum(axis=0)  # (r,): χ² with k − 1 df
    if rule == "predictive variances":
        return GaussianModel(model.spec, prior, model.theta, model.var + var_theta)
    if rule.endswith("prior shrunk"):
        # A deviation from the centre has the variance of θ̂ less the centre's, 1 / Σ precisions.
        # Unclipped: the clipped means' deviations sum to a χ² below its degrees of freedom.
        spread = np.maximum(var_theta - 1 / (1 / var_theta).sum(axis=0), 1e-12)
        raw_centre = (theta / var_theta).sum(axis=0) / (1 / var_theta).sum(axis=0)
        z = (theta - raw_centre) / np.sqrt(spread)
        dims = z.size - z.shape[1]  # r(k − 1) independent deviations
        shrunk = shrunk_prior(stats, prior)
        if rule == "prior shrunk" or dims < 3:
            return GaussianModel(model.spec, shrunk, model.theta, model.var)
        if rule.startswith("g-modelling"):
            means = np.clip(raw_centre + np.sqrt(spread) * grid_posterior_means(z), -1.0, 1.0)
            return GaussianModel(model.spec, shrunk, means, model.var)
        factor = max(0.0, 1 - (dims - 2) / ((z**2).sum() * (k - 1) / k))  # positive-part James–Stein
        if rule.startswith("James–Stein means"):
            return GaussianModel(model.spec, shrunk, centre + factor * (model.theta - centre), model.var)
        if factor == 0:
            return pooled_model(model, prior)
        # λ·Σ log N(z; θ, σ²) is N(z; θ, σ²/λ) with the class prior times Π σ^(1 − λ)
        tilted = np.log(shrunk) + (1 - factor) * 0.5 * np.log(model.var).sum(axis=1)
        tilted = np.exp(tilted - tilted.max())
        return GaussianModel(model.spec, tilted / tilted.sum(), model.theta, model.var / factor)
    if rule in ("the range and the prior spread-matched", "expected log-likelihood on the range"):
        means, posterior_variance = range_posterior(theta, var_theta)
        if rule.startswith("expected"):
            tilted = np.log(prior) - 0.5 * (posterior_variance / model.var).sum(axis=1)
            tilted = np.exp(tilted - tilted.max())
            return GaussianModel(model.spec, tilted / tilted.sum(), means, model.var)
        var = model.var + posterior_variance if theta.shape[1] > 1 else model.var
        return GaussianModel(model.spec, shrunk_prior(stats, prior, spread_matched=True), means, var)
    lead = majority_lead(prior, input_covariance(stats.spec.oracles[0], max(stats.states[0].n, 1), prior))
    if rule == "Wald gate if the prior leads":
        from aggregator.estimation.dependence import combined_p_value, gaussian_feature_p_values

        if lead >= 2 and combined_p_value(gaussian_feature_p_values(stats)) > 0.05:
            return pooled_model(model, prior)
        return model
    if rule in (
        "predictive on the range where the means are lost",
        "the same, if the prior leads",
        "the same, the prior shrunk if one is lost",
    ):
        if rule.endswith("leads") and lead < 2:
            return model
        posterior, posterior_variance = range_posterior(theta, var_theta)
        lost = (var_theta > 1).any(axis=0)  # (r,): a standard error above half the range
        means, var = model.theta.copy(), model.var.copy()
        means[:, lost], var[:, lost] = posterior[:, lost], (model.var + posterior_variance)[:, lost]
        shrink = rule.endswith("if one is lost") and lost.any()
        return GaussianModel(model.spec, shrunk_prior(stats, prior) if shrink else prior, means, var)
    if rule.endswith("on the range") or (rule == "predictive on the range if the prior leads" and lead >= 2):
        posterior, posterior_variance = range_posterior(theta, var_theta)
        if rule == "posterior mean on the range":
            return GaussianModel(model.spec, prior, posterior, model.var)
        return GaussianModel(model.spec, prior, posterior, model.var + posterior_variance)
    if rule == "predictive on the range if the prior leads":
        return model
    if rule == "posterior mean":
        spread = ((model.theta - model.theta.mean(axis=0)) ** 2).sum(axis=0) - (1 - 1 / k) * var_theta.sum(axis=0)
        tau2 = np.maximum(spread, 0.0) / (k - 1)
        shrunk = centre + tau2 / (tau2 + var_theta) * (model.theta - centre)
        return GaussianModel(model.spec, prior, shrunk, model.var)
    if rule.startswith("weak coordinates"):
        if rule.endswith("leads") and lead < WEAK_LEAD:
            return model
        return pooled_model(model, prior, chi2.sf(statistic, k - 1) > WEAK_P)
    if chi2.sf(statistic.sum(), statistic.size * (k - 1)) <= 0.05 or (rule == "gate if the prior leads" and lead < 2):
        return model
    return pooled_model(model, prior)


def run(name: str, approach: int, reduce, epsilon: float, seed: int) -> list[float]:
    """One collection: the test accuracy of the majority class, ``prior only``, ``normsub`` and
    each rule (in the order of :data:`RULES`)."""
    from aggregator.estimation.estimators import build_model
    from sim.datasets import load_dataset
    from sim.experiment import DEFAULT_THETA, Setup, collect, spec_for, split

    data = load_dataset(name)
    X_train, X_test, y_train, y_test = split(data, seed)
    setup = Setup("gaussian", None, reduce, 1 if reduce else None, approach)
    spec = spec_for(data, "DE", epsilon, DEFAULT_THETA, setup, X_train, y_train)
    stats = collect(spec, X_train, y_train, np.random.default_rng(seed), "replay")
    y_test = np.asarray(y_test, dtype=object)
    labels, counts = np.unique(np.asarray(y_train, dtype=object), return_counts=True)
    model = build_model(stats, "normsub")
    prior_only = np.asarray(spec.classes, dtype=object)[np.argmax(model.class_prior)]
    return [
        float(np.mean(y_test == labels[np.argmax(counts)])),
        float(np.mean(y_test == prior_only)),
        model.score(X_test, y_test),
        *(apply_rule(rule, stats, model).score(X_test, y_test) for rule in RULES),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100, help="paired repetitions (seeds 0, 1, …) per cell")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (seeds first, first + 1, …)")
    parser.add_argument("--eps", default="0.5,1,2,4", help="ε values, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the Markdown table goes")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    cells = [(*s, float(e)) for s in SETTINGS for e in args.eps.split(",")]
    seeds = range(args.first_seed, args.first_seed + args.reps)
    jobs = [(*c, seed) for c in cells for seed in seeds]
    runs = Parallel(n_jobs=args.jobs, return_as="generator")(delayed(run)(*j) for j in jobs)
    results = np.array(list(tqdm(runs, total=len(jobs), desc="collections"))).reshape(len(cells), args.reps, -1)
    lines = [
        f"# Rules toward the constant classifier for the Gaussian model (`python research/gaussian_rules.py --reps {args.reps} --first-seed {args.first_seed}`)",
        "",
        (
            f"DE class input, replay mode, seeds {seeds[0]}–{seeds[-1]}; rule columns: the rule − `normsub`, "
            "paired (± standard error)."
        ),
        "",
        f"| data set | approach | features | ε | majority | prior only | normsub | normsub − prior only | {' | '.join(RULES)} |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(RULES),
    ]
    for (name, approach, reduce, epsilon), r in zip(cells, results):
        features = {None: "original", "pca": "PCA", "dca": "DCA"}[reduce]
        gains = " | ".join(paired(r[:, 3 + i] - r[:, 2]) for i in range(len(RULES)))
        lines.append(
            f"| {name} | A{approach} | {features} | {epsilon:g} | {r[:, 0].mean():.3f} | {r[:, 1].mean():.3f} "
            f"| {r[:, 2].mean():.3f} | {paired(r[:, 2] - r[:, 1])} | {gains} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
