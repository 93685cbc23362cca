"""How strongly to smooth, chosen per collection from its own reports by a parametric bootstrap.

One smoothing strength does not suit every collection: on car at ε ≤ 1 eight times the
empirical-Bayes weight or more is best (the noise of six features' conditionals otherwise outvotes
the class prior), while on chess and mushroom anything above 1 or 2 loses. Which case a collection
is in shows in its reports: estimate the population, draw collections of the same size from that
estimate through the same oracles, and see which strength classifies records drawn from it best.

The estimate the draws come from decides the choice. It is each class's conditional shrunk toward
uniform by the empirical-Bayes weight of its own deviation (:func:`plug_in_truth`), with the spread
measured on the unbiased count estimates, where the oracle's variance is the noise they carry.
The earlier plug-in (the smoothed model itself at strength 0.6) measured the spread on Norm-Sub
projected counts, which carry less noise than that, and kept part of every deviation, noise
included. It drew from a population with more class signal than car has, where weak smoothing
looked 0.04 better than it is: on car at ε = 1 its choice scored 0.690 against 0.702 with this
plug-in (and the majority class's 0.704). Drawn from car's exact model instead, the same bootstrap
picks the strength that is best on the real test rows (README, *Estimators*).

Where the classes are about even the posterior mean's shortfall of class signal costs instead
(chess and mushroom at ε = 0.5), so there the world keeps the estimated spread
(:func:`spread_matched_truth`); where they are closer still to even the class prior holds nothing
for noisy features to outvote, and the weakest strength is kept without a bootstrap.

Even the posterior mean keeps some noise as signal, and where the reports show no class dependence
at all that noise is all the signal it has. So each strength is also scored in a null world
(:func:`null_truth`, no feature telling the classes apart), and the two scores are mixed by the
probability of that world given the reports (:mod:`aggregator.dependence`): car at ε = 1 0.703,
at 0.5 0.693 (0.689 without it). Everything reads only the aggregated statistics
(post-processing): no privacy is spent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from protocols import simulate_states

from .dependence import dependence_p_value, null_probability
from .model import NaiveBayesModel, one_hot
from .smoothing import Unsmoothed
from .statistics import CollectionStatistics

# At 1024 every class's conditional is all but uniform: the class prior decides, as it does for the
# constant classifier.
STRENGTHS = (1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 1024.0)
DRAWS = 12
RECORDS = 2000
# Collections larger than this (cells summed over inputs) keep strength 1 without a bootstrap: its
# cost grows with the cells, and a DE input's exact draw holds a d × d matrix.
MAX_CELLS = 20_000
MAX_DE_DOMAIN = 512
# The spread of a two-valued feature's class share under a uniform prior on it (a flat Beta's
# variance): the least spread the plug-in world gives such a feature (plug_in_truth).
FLAT_SPREAD = 1.0 / 12
# Where the class prior's normalised entropy (1: every class alike) is above this, the bootstrap
# draws from the spread-matched world (choose_strength). Picked from 0.85, 0.9 and 0.95 on seeds 0–199
# (chess and mushroom's 0.52 of one class, Australian's 0.56 and diabetes' 0.65 lie above it; car's
# 0.70 of four classes, 0.60, and connect-4's 0.66 of three, 0.77, below) and checked on seeds 200–299.
EVEN_PRIOR = 0.9
# Above this evenness the collection keeps the weakest strength without a bootstrap
# (choose_strength). Picked from 0.9, 0.95, 0.97, 0.98 and 0.99 on seeds 0–199 (above 0.9 diabetes'
# 0.65 of one class, 0.93, lost up to 0.005 at ε = 0.5) and checked on seeds 200–299.
EVEN_KEEPS_WEAKEST = 0.95
# A stronger smoothing must beat a weaker one by this much expected accuracy to be chosen: where
# every strength classifies alike (strong signal, many reports) the weakest, whose probabilities
# converge fastest, is kept rather than whichever the draws' noise favours.
TIE = 0.002

Derive = Callable[[CollectionStatistics], Unsmoothed]


def statistics_seed(stats: CollectionStatistics) -> int:
    """A seed that is a function of the statistics alone (so the same reports give the same model)."""
    digest = hashlib.sha256()
    for state in stats.states:
        digest.update(np.int64(state.n).tobytes())
        digest.update(np.ascontiguousarray(state.support, dtype=np.float64).tobytes())
    return int.from_bytes(digest.digest()[:8], "little")


def flat_floor(d: int) -> float:
    """The least class spread (per share, squared) :func:`plug_in_truth` gives a feature of ``d``
    values toward uniform: :data:`FLAT_SPREAD` for two values, none for more."""
    return FLAT_SPREAD if d == 2 else 0.0


def plug_in_truth(
    stats: CollectionStatistics,
    base: Unsmoothed,
    floor: Callable[[int], float] = flat_floor,
    spread_matched: bool = False,
) -> NaiveBayesModel:
    """The population the bootstrap draws from: ``base``'s class counts, and each class's Norm-Sub
    conditional moved toward ``base.target`` by the weight ``w = σ² / (σ² + s²)``: the
    empirical-Bayes posterior mean of the conditional.

    Toward uniform, ``σ² = v/T²`` is the noise variance of one of the class's shares (``v`` the
    oracle's cell variance, ``T`` the class's expected count on the input: its pooled share times
    the input's reports) and ``s²`` the true spread of its shares around uniform. Toward the
    marginal, the deviation from the pooled marginal ``m = Σ_c π_c·share_c`` carries the noise
    ``σ_c² = (1 − π_c)²·v/T_c² + Σ_{c' ≠ c} π_c'²·v/T_c'²`` and ``s²`` is its true spread. Either
    spread is estimated without bias from the raw (unprojected) count estimates, as their mean
    squared deviation less the noise, and at least 0.

    Toward uniform, a feature of two values gives each class one degree of freedom for its spread,
    and the estimate is zero whenever the class's deviation falls within its noise: about half the
    time for a strong feature at ε = 0.5 (Australian after DCA to one component, 0.86 accurate
    non-private). The world then has no feature where the population has a strong one, and the
    bootstrap picks the class prior (0.06 below ``strength 1`` there before this floor, up to 0.055
    after it, up to 0.024 once even classes kept strength 1; README, *The bootstrap's world on few
    cells*). So such a feature's spread
    is at least :data:`FLAT_SPREAD`, a flat prior's: the world never shrinks harder than a uniform
    prior on the share would. With three or more values the estimate has more to go on, and the
    same floor (a flat Dirichlet's) cost car 0.002 at ε ≤ 1 (``python bench/world_floor.py``).
    ``floor(d)`` gives that least spread for a feature of ``d`` values (:func:`flat_floor`).

    The posterior mean keeps ``1 − w`` of each deviation, so its squared size is ``(1 − w)²`` of
    the observed one, less than the estimated spread: a world with less class signal than the
    reports estimate, where smoothing looks better than it is. With ``spread_matched`` each
    deviation is kept at ``√(1 − w)`` instead, whose squared size is the estimated spread
    (:func:`spread_matched_truth`)."""
    spec, k = stats.spec, stats.spec.n_classes
    prior = base.class_count / base.class_count.sum()
    tables = []
    for oracle, state, raw, projected in zip(
        spec.oracles[1:], stats.states[1:], stats.estimated_counts()[1:], base.tables
    ):
        d = projected.shape[1]
        expected = np.maximum(prior * max(state.n, 1), 1e-9)  # (k,)
        noise = oracle.variance(max(state.n, 1))[0] / expected**2
        raw_shares = raw.reshape(-1, k).T / expected[:, None]  # (k, d)
        shares = projected / np.maximum(projected.sum(axis=1, keepdims=True), 1e-12)
        if base.target == "marginal":
            noise = (1 - prior) ** 2 * noise + (prior**2 * noise).sum() - prior**2 * noise
            deviation = raw_shares - prior @ raw_shares
            aim = projected.sum(axis=0) / max(projected.sum(), 1e-12)
        else:
            deviation = raw_shares - 1.0 / d
            aim = np.full(d, 1.0 / d)
        signal = np.maximum((deviation**2).mean(axis=1) - noise, 0.0)
        if base.target == "uniform":
            signal = np.maximum(signal, floor(d))
        weight = (noise / (noise + signal + 1e-300))[:, None]
        if spread_matched:
            weight = 1 - np.sqrt(1 - weight)
        smoothed = np.maximum((1 - weight) * shares + weight * aim, 1e-12)
        tables.append(smoothed / smoothed.sum(axis=1, keepdims=True) * base.class_count[:, None])
    return NaiveBayesModel(spec, base.class_count, tables)


def spread_matched_truth(stats: CollectionStatistics, base: Unsmoothed) -> NaiveBayesModel:
    """:func:`plug_in_truth` with each class's deviation from the target kept at ``√(1 − w)``: a
    population whose class signal has the size the reports estimate, not the posterior mean's
    smaller one."""
    return plug_in_truth(stats, base, spread_matched=True)


def prior_evenness(class_count: np.ndarray) -> float:
    """The class prior's entropy over its largest, ``log k``: 1 when every class is as common,
    toward 0 as one class holds everyone (car's 0.70 / 0.22 / 0.04 / 0.04: 0.61)."""
    prior = np.asarray(class_count, dtype=float) / max(float(np.sum(class_count)), 1e-300)
    held = prior[prior > 0]
    return float(-(held * np.log(held)).sum() / np.log(len(prior))) if len(prior) > 1 else 1.0


def null_truth(stats: CollectionStatistics, base: Unsmoothed) -> NaiveBayesModel:
    """The population without class signal that the reports could also come from: ``base``'s
    class counts, and every class's conditional the feature's pooled marginal (``base``'s tables
    summed over the classes)."""
    tables = []
    for table in base.tables:
        marginal = table.sum(axis=0) + 1e-9
        tables.append(np.outer(base.class_count, marginal / marginal.sum()))
    return NaiveBayesModel(stats.spec, base.class_count, tables)


# The bootstrap's populations, each with its own seed offset so that their draws are independent.
# The spread-matched world stands in for the plug-in one and so shares its offset.
WORLDS = {"plug-in": (plug_in_truth, 0), "spread-matched": (spread_matched_truth, 0), "null": (null_truth, 1)}


def sample_records(model: NaiveBayesModel, m: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``m`` records drawn from ``model`` as if it were the population: integer codes ``(m, n)``
    and each record's posterior class probabilities under the model ``(m, k)``."""
    k = len(model.class_count)
    classes = rng.choice(k, size=m, p=model.class_prior)
    columns = []
    for log_table in model.feature_log_prob:
        cumulative = np.cumsum(np.exp(log_table), axis=1)[classes]  # (m, n_i)
        drawn = (rng.random(m)[:, None] * cumulative[:, -1:] < cumulative).argmax(axis=1)
        columns.append(drawn)
    codes = np.column_stack(columns) if columns else np.zeros((m, 0), dtype=np.int64)
    jll = model.joint_log_likelihood_codes(codes)
    posterior = np.exp(jll - jll.max(axis=1, keepdims=True))
    return codes, posterior / posterior.sum(axis=1, keepdims=True)


def draw_statistics(model: NaiveBayesModel, like: CollectionStatistics, rng) -> CollectionStatistics:
    """A collection as ``like`` (the same spec, the same number of reports on each input) whose
    people are drawn from ``model``: each input's true histogram is multinomial, then its reports'
    state is drawn exactly through the input's oracle."""
    prior = model.class_prior
    joints = [prior] + [(prior[:, None] * np.exp(t)).T.ravel() for t in model.feature_log_prob]  # a·k + c
    drawn = CollectionStatistics(like.spec)
    histograms = [rng.multinomial(state.n, joint / joint.sum()) for state, joint in zip(like.states, joints)]
    drawn.states = simulate_states(like.spec.oracles, histograms, rng)
    return drawn


def bootstrap_too_large(spec) -> bool:
    """Whether a bootstrap of ``spec``'s collections costs too much to run for each model: more
    than :data:`MAX_CELLS` cells summed over the inputs, or a DE input over :data:`MAX_DE_DOMAIN`
    values (its exact draw holds a d × d matrix)."""
    from protocols import DirectEncoding

    oracles = spec.oracles
    return sum(o.domain_size for o in oracles) > MAX_CELLS or any(
        isinstance(o, DirectEncoding) and o.domain_size > MAX_DE_DOMAIN for o in oracles
    )


def choose_strength(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed | None = None,
    strengths: tuple[float, ...] = STRENGTHS,
    draws: int = DRAWS,
    records: int = RECORDS,
) -> float:
    """The strength in ``strengths`` whose smoothing of ``derive(drawn)`` has the highest expected
    accuracy over ``draws`` collections drawn from :func:`plug_in_truth` of ``derive(stats)`` (or
    ``base``), scored on ``records`` records from the same truth (:func:`bootstrap_accuracies`),
    mixed with its expected accuracy in :func:`null_truth` by the probability that no feature
    depends on the class (:func:`~aggregator.dependence.null_probability` of
    :func:`~aggregator.dependence.dependence_p_value`; at most one half). The plug-in world alone
    holds whatever class signal the noise left in the estimate, and where the reports show none
    (car at ε ≤ 1) it rewarded weak smoothing in runs that then lost to the class prior; the null
    world charges what that costs, which is much where the class prior is uneven and little
    where it is even.

    Where the class prior is about even (:func:`prior_evenness` above :data:`EVEN_PRIOR`) the
    plug-in world is :func:`spread_matched_truth` instead. The posterior mean's smaller class
    signal made smoothing look better than it is, and chess and mushroom at ε = 0.5 lost 0.008 to
    ``strength 1`` for it; where the prior is even it predicts little, so the world should show
    the features at their estimated size. Where the prior is uneven that same shortfall keeps noisy
    features from outvoting it, and car at ε = 0.5 lost 0.006–0.010 to the spread-matched world
    (``python bench/issue_baseline.py``). Of strengths within :data:`TIE` of the best, the first
    (weakest) is taken.

    Where the classes are closer still to even (:data:`EVEN_KEEPS_WEAKEST`), no bootstrap is run
    and ``strengths[0]`` is kept: the class prior then adds about the same to every class's
    score, so the strength only reweighs the features against each other, and the bootstrap's
    stronger choices mostly cost signal (Australian up to 0.034 at ε = 0.5, mushroom at ε = 0.1
    up to 0.008; README, *The spread-matched world*). Toward the marginal (``base.target``) the
    bootstrap still chooses: kept at strength 1 there, ``marginal`` scored 0.700 on chess at ε = 2
    against 0.703, and its log-loss rose from 0.639 to 0.688 nats (``python bench/estimators.py``).

    Returns ``strengths[0]`` when there are no reports, when the class prior is that even (toward
    uniform), or when the collection is larger than :data:`MAX_CELLS` cells or holds a DE input
    over :data:`MAX_DE_DOMAIN` values."""
    if stats.n_reports == 0 or len(strengths) == 1 or bootstrap_too_large(stats.spec):
        return strengths[0]
    base = base or derive(stats)
    evenness = prior_evenness(base.class_count)
    if evenness > EVEN_KEEPS_WEAKEST and base.target == "uniform":
        return strengths[0]
    world = "spread-matched" if evenness > EVEN_PRIOR else "plug-in"
    accuracy = bootstrap_accuracies(stats, derive, base, strengths, draws, records, world).mean(axis=0)
    null = bootstrap_accuracies(stats, derive, base, strengths, draws, records, world="null").mean(axis=0)
    weight = null_probability(dependence_p_value(stats, base.class_count))
    score = weight * null + (1 - weight) * accuracy
    return strengths[int(np.flatnonzero(score >= score.max() - TIE)[0])]


def bootstrap_accuracies(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed | None = None,
    strengths: tuple[float, ...] = STRENGTHS,
    draws: int = DRAWS,
    records: int = RECORDS,
    world: str = "plug-in",
) -> np.ndarray:
    """The expected accuracy of each strength in each drawn collection, shape ``(draws,
    len(strengths))``: the posterior probability, under the truth, of the class the smoothed
    ``derive(drawn)`` predicts, averaged over ``records`` records drawn from the truth
    (:func:`bootstrap_predictions`)."""
    predicted, posterior = bootstrap_predictions(stats, derive, base, strengths, draws, records, world)
    return posterior[np.arange(len(posterior))[:, None], predicted].mean(axis=1)


def bootstrap_predictions(
    stats: CollectionStatistics,
    derive: Derive,
    base: Unsmoothed | None = None,
    strengths: tuple[float, ...] = STRENGTHS,
    draws: int = DRAWS,
    records: int = RECORDS,
    world: str = "plug-in",
) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's raw material: the class each strength's smoothing of ``derive(drawn)``
    predicts for each record in each drawn collection, shape ``(draws, records, len(strengths))``,
    and the records' class probabilities under the truth (the ``world`` of :data:`WORLDS`:
    :func:`plug_in_truth` or :func:`null_truth` of ``base`` or ``derive(stats)``), shape
    ``(records, k)``. Every strength is scored on the same draws and records, all at once. The
    draws are seeded by the statistics, so the result is a function of the reports."""
    population, offset = WORLDS[world]
    rng = np.random.default_rng(statistics_seed(stats) + offset)
    truth = population(stats, base or derive(stats))
    codes, posterior = sample_records(truth, records, rng)
    # The records one-hot over every feature's values, so that a model's joint log-likelihoods
    # of all records are one sparse product.
    onehot = one_hot(codes, [t.shape[1] for t in truth.feature_log_prob])
    predicted = [predictions(derive(draw_statistics(truth, stats, rng)), onehot, strengths) for _ in range(draws)]
    return np.array(predicted), posterior


def predictions(drawn: Unsmoothed, onehot, strengths) -> np.ndarray:
    """The class ``drawn`` smoothed at each of ``strengths`` predicts for each record, shape
    ``(m, S)``; ``onehot`` holds the records one-hot ``(m, Σ n_i)``."""
    records, n = onehot.shape[0], len(strengths)
    log_prob = np.concatenate(drawn.log_probabilities(np.array(strengths)), axis=2)  # (S, k, Σ n_i)
    k = log_prob.shape[1]
    jll = (onehot @ log_prob.reshape(n * k, -1).T).reshape(records, n, k)  # (m, S, k)
    jll += np.log(drawn.class_count / drawn.class_count.sum())
    return jll.argmax(axis=2)


def expected_accuracy(drawn: Unsmoothed, onehot, posterior: np.ndarray, strengths) -> np.ndarray:
    """Per strength (shape ``(S,)``), the mean over records of the probability, under the truth,
    of the class that ``drawn`` smoothed at that strength predicts: ``onehot`` holds the records
    one-hot ``(m, Σ n_i)`` and ``posterior`` their true class probabilities ``(m, k)``."""
    predicted = predictions(drawn, onehot, strengths)
    return posterior[np.arange(len(posterior))[:, None], predicted].mean(axis=0)
