"""One simulated collection: split, every training row sends one report, estimate, score."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import CategoricalNB, GaussianNB

from aggregator import CollectionStatistics, build_model
from aggregator.estimation.model import one_hot
from aggregator.estimation.reduction import fit_projection
from participant import CollectionSpec, Feature, choose_inputs, encode_features, encode_labels, population_inputs
from participant.continuous import ContinuousFeature, Preparation
from participant.dummies import dummy_states
from participant.reporting import PerturbedInputs, perturb_population
from protocols import DEFAULT_THETA, simulate_states

from .datasets import Dataset

TEST_SIZE = 0.2


# Bins per coordinate the paper used (section 4.2).
PAPER_BINS = {"australian": 2, "diabetes": 4}


@dataclass(frozen=True)
class Setup:
    """How a continuous data set is collected: ``model`` "discrete" (``bins`` equal-width bins)
    or "gaussian" (multi-dimensional ``approach`` 1, 2 or 3), optionally after reducing to
    ``components`` coordinates with ``reduce`` ("pca" or "dca")."""

    model: str = "discrete"
    bins: int | None = None
    reduce: str | None = None
    components: int | None = None
    approach: int = 3

    def describe(self) -> str:
        what = f"{self.model} model"
        what += f", {self.bins} bins" if self.model == "discrete" and self.bins else ""
        what += f", approach {self.approach}" if self.model == "gaussian" else ""
        if self.reduce:
            what += f", {self.reduce.upper()} to {self.components} component(s) fitted on the training split"
        return what


def spec_for(
    dataset: Dataset,
    protocol: str,
    epsilon: float,
    theta: float = DEFAULT_THETA,
    setup: Setup | None = None,
    X_train=None,
    y_train=None,
    budget: str = "one-report",
) -> CollectionSpec:
    """The collection spec an operator would publish for ``dataset``: its documented domains, or
    for a continuous data set its declared ranges, with a projection fitted on
    ``X_train, y_train`` when ``setup.reduce`` asks for one. (A real collection fits it on a
    separate reference sample: fitting on the surveyed people, as the paper's experiments do,
    leaks information about them outside the LDP guarantee.)"""
    setup = setup or Setup()
    if not dataset.continuous:
        if setup != Setup(model="discrete", bins=setup.bins):
            raise ValueError(f"{dataset.name} is categorical: it takes neither --model gaussian nor --reduce")
        features = [Feature(name, cats) for name, cats in zip(dataset.feature_names, dataset.categories)]
        return CollectionSpec(
            features, dataset.classes, protocol, epsilon, theta=theta, label=dataset.label_name, budget=budget
        )
    inputs = tuple(ContinuousFeature(name, lo, hi) for name, (lo, hi) in zip(dataset.feature_names, dataset.ranges))
    projection = None
    if setup.reduce:
        projection = fit_projection(setup.reduce, X_train, y_train, inputs, setup.components or 1)
    bins = (setup.bins or PAPER_BINS.get(dataset.name, 4)) if setup.model == "discrete" else None
    return CollectionSpec(
        [],
        dataset.classes,
        protocol,
        epsilon,
        theta=theta,
        label=dataset.label_name,
        continuous=Preparation(inputs, projection, bins),
        model=setup.model,
        approach=setup.approach,
        budget=budget,
    )


@dataclass
class RunResult:
    """Test accuracies of one repetition: per estimator, and of non-private Naive Bayes; the
    best constant classifier's on the test rows (:func:`majority_accuracy`) and, where
    scored, each estimator's log-loss on the test split (nats per record) and the constant's: the
    training split's class shares as every record's probabilities (:func:`prior_log_loss`)."""

    seed: int
    accuracy: dict[str, float]
    nonprivate_accuracy: float
    n_train: int
    majority_accuracy: float = float("nan")
    log_loss: dict[str, float] = field(default_factory=dict)
    prior_log_loss: float = float("nan")


def test_rows(n_train: int) -> int:
    """About how many test rows a split with ``n_train`` training rows holds."""
    return round(n_train * TEST_SIZE / (1 - TEST_SIZE))


def prior_log_loss(y_train, y_test) -> float:
    """The test log-loss (nats per record) of knowing nothing but the training split's class
    shares, each class's count plus one (so that a class the split left out of training costs a
    finite amount, as CategoricalNB's smoothing does)."""
    classes, codes = np.unique(np.concatenate([np.asarray(y_train), np.asarray(y_test)]), return_inverse=True)
    counts = np.bincount(codes[: len(y_train)], minlength=len(classes)) + 1.0
    return float(-np.log(counts / counts.sum())[codes[len(y_train) :]].mean())


def simulate_reports(spec: CollectionSpec, X_train, y_train, rng) -> PerturbedInputs:
    """Every training row becomes one participant with one report, drawn from ``rng``."""
    inputs = population_inputs(spec, X_train, y_train)
    chosen = choose_inputs(spec, len(inputs[0]), rng)
    return perturb_population(spec, inputs, chosen, rng)


MODES = ("replay", "fast")


def simulate_collection(
    spec: CollectionSpec, inputs: list[np.ndarray], rng, mode: str = "replay", class_share: float | None = None
) -> CollectionStatistics:
    """The aggregate of a population whose values for every input are ``inputs``.

    ``replay`` draws every person's report with the participant code; ``fast`` draws each
    input's state from its exact distribution (see ``Mechanism.simulate``), so its cost grows with
    the domain size, not with the people. Who reports what follows ``spec.budget`` (and, for one
    report per person, ``class_share``: see :func:`~participant.reporting.choose_inputs`).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    stats = CollectionStatistics(spec)
    m = len(inputs[0])
    if spec.budget == "one-report":
        chosen = choose_inputs(spec, m, rng, class_share)
        if mode == "replay":
            stats.add_population(perturb_population(spec, inputs, chosen, rng))
        else:
            stats.states = [o.simulate(inputs[i][chosen == i], rng) for i, o in enumerate(spec.oracles)]
    elif mode == "replay":
        stats.states = [o.aggregate(o.perturb(inputs[i], rng)) for i, o in enumerate(spec.oracles)]
    else:
        stats.states = [o.simulate(inputs[i], rng) for i, o in enumerate(spec.oracles)]
    return stats


def halved_collection(
    spec: CollectionSpec, inputs: list[np.ndarray], rng, mode: str = "replay", class_share: float | None = None
) -> CollectionStatistics:
    """:func:`simulate_collection` of the people split in two by a fair coin each (what splitting
    reports by their random ids does), each half drawn on its own: the same distribution as one
    collection of them all, whose statistics it returns with the two halves as its ``halves``
    (what the ``auto`` estimator chooses from)."""
    half = rng.integers(0, 2, len(inputs[0])).astype(bool)
    parts = tuple(simulate_collection(spec, [x[half == h] for x in inputs], rng, mode, class_share) for h in (False, True))
    return joined(parts)


def joined(parts) -> CollectionStatistics:
    """The statistics of two halves' reports together, the halves kept as its ``halves``."""
    stats = CollectionStatistics(parts[0].spec)
    stats.states = [a + b for a, b in zip(parts[0].states, parts[1].states)]
    stats.dummies = parts[0].dummies + parts[1].dummies
    stats.halves = tuple(parts)
    return stats


def with_dummies(stats: CollectionStatistics, dummies: int, seed: int) -> CollectionStatistics:
    """``stats`` with a shuffler's ``dummies`` dummy reports added (drawn exactly,
    :func:`participant.dummies.dummy_states`, from a generator of their own, so that the people's
    reports of a seed are the same draws with any number of dummies) and counted as such."""
    if dummies and stats.halves is not None:  # each dummy falls in either half, as its random id says
        split = np.random.default_rng((seed, DUMMY_STREAM, 1)).binomial(dummies, 0.5)
        return joined(tuple(with_dummies(h, d, seed + i) for i, (h, d) in enumerate(zip(stats.halves, (split, dummies - split)))))
    if dummies:
        rng = np.random.default_rng((seed, DUMMY_STREAM))
        stats.states = [a + b for a, b in zip(stats.states, dummy_states(stats.spec, dummies, rng))]
        stats.dummies = float(dummies)
    return stats


# The generator stream a seed's dummies are drawn from, apart from its people's.
DUMMY_STREAM = 0x64756D6D


def collect(
    spec: CollectionSpec,
    X_train,
    y_train,
    rng,
    mode: str = "replay",
    class_share: float | None = None,
    halves: bool = False,
) -> CollectionStatistics:
    """Every training row becomes one participant; returns the aggregate of their reports (with
    ``halves``, drawn as two halves and carrying them: :func:`halved_collection`)."""
    simulate = halved_collection if halves else simulate_collection
    return simulate(spec, population_inputs(spec, X_train, y_train), rng, mode, class_share)


def split(dataset: Dataset, seed: int):
    """The random 80/20 split of repetition ``seed``: ``X_train, X_test, y_train, y_test``."""
    return train_test_split(dataset.X, dataset.y, test_size=TEST_SIZE, random_state=seed)


def nonprivate_accuracy(spec: CollectionSpec, X_train, y_train, X_test, y_test) -> float:
    """Accuracy of the non-private counterpart on the raw training rows, with the same encoding:
    scikit-learn's CategoricalNB (Laplace smoothing) on the categories or bins, or GaussianNB on
    the prepared (normalised, projected) coordinates."""
    if spec.model == "gaussian":
        prepare = spec.continuous.transform
        # A declared range that excludes the data clips every value to one point: a zero variance,
        # whose log and division numpy warns about (the CSV reader already said what was clipped).
        with np.errstate(divide="ignore", invalid="ignore"):
            nb = GaussianNB().fit(prepare(X_train), encode_labels(y_train, spec))
            return float(nb.score(prepare(X_test), encode_labels(y_test, spec)))
    n_categories = [len(f.categories) for f in spec.features]
    nb = CategoricalNB(min_categories=n_categories).fit(encode_features(X_train, spec), encode_labels(y_train, spec))
    return float(nb.score(encode_features(X_test, spec), encode_labels(y_test, spec)))


def scored(
    spec: CollectionSpec, stats, seed: int, estimators, X_train, X_test, y_train, y_test, log_loss: bool = False
) -> RunResult:
    """Repetition ``seed``'s result from its collection ``stats``: each named estimator's test
    accuracy, the non-private model's, and the best constant's on the test rows; with
    ``log_loss``, each estimator's test log-loss too (nats per record, at the model's own
    temperature). Without it the models are built at temperature 1, which changes no prediction
    and skips the temperature's bootstrap."""
    models = {name: build_model(stats, name, None if log_loss else 1.0) for name in estimators}
    accuracy = {name: model.score(X_test, y_test) for name, model in models.items()}
    losses = {name: held_out_log_loss(model, X_test, y_test) for name, model in models.items()} if log_loss else {}
    nonprivate = nonprivate_accuracy(spec, X_train, y_train, X_test, y_test)
    constant = prior_log_loss(y_train, y_test) if log_loss else float("nan")
    return RunResult(seed, accuracy, nonprivate, len(y_train), majority_accuracy(y_train, y_test), losses, constant)


def majority_accuracy(y_train, y_test) -> float:
    """The test accuracy of the best constant classifier on the test rows: the share of their most
    common class. No constant scores more there, so a model that beats it beats every constant
    (the training split's majority scores less where the splits' class shares differ, and a
    model without signal can pass it by chance). ``y_train`` is not read; it is taken so that
    every caller states the split it scores."""
    _, counts = np.unique(np.asarray(y_test), return_counts=True)
    return float(counts.max() / counts.sum())


def held_out_log_loss(model, X_test, y_test) -> float:
    """``model``'s mean negative log-probability of the true class over the test rows, in nats."""
    truth = np.asarray(y_test, dtype=object)[:, None] == np.asarray(model.classes_, dtype=object)[None, :]
    if not truth.any(axis=1).all():
        raise ValueError("a test label is not one of the model's classes")
    return float(-model.predict_log_proba(X_test)[np.arange(len(truth)), truth.argmax(axis=1)].mean())


def run_once(
    dataset: Dataset,
    protocol: str,
    epsilon: float,
    seed: int,
    estimators: tuple[str, ...] = ("paper",),
    theta: float = DEFAULT_THETA,
    setup: Setup | None = None,
    budget: str = "one-report",
    mode: str = "replay",
    class_share: float | None = None,
    log_loss: bool = False,
    dummies: int = 0,
) -> RunResult:
    """One repetition: a random 80/20 split and one collection, scored by every named estimator
    on the same reports. Deterministic given ``seed``. ``class_share``: the share of people who
    report the class input (None: uniform over the inputs). Without ``log_loss`` the result scores
    accuracy alone, and its models skip the temperature's bootstrap. ``dummies``: a shuffler's
    dummy reports added to the collection (:func:`with_dummies`)."""
    if not dataset.continuous:
        return runner_for(dataset).run(
            protocol, epsilon, seed, estimators, theta, budget, mode, class_share, log_loss, dummies
        )
    X_train, X_test, y_train, y_test = split(dataset, seed)
    spec = spec_for(dataset, protocol, epsilon, theta, setup, X_train, y_train, budget)
    halves = "auto" in estimators
    stats = with_dummies(collect(spec, X_train, y_train, np.random.default_rng(seed), mode, class_share, halves), dummies, seed)
    return scored(spec, stats, seed, estimators, X_train, X_test, y_train, y_test, log_loss)


def category_counts(codes, labels, n_categories, k: int) -> np.ndarray:
    """How many rows of each class hold each feature's categories: shape ``(k, Σ n_i)``, features
    side by side in spec order (one ``bincount``, not scikit-learn's per-category loop)."""
    offsets = np.concatenate([[0], np.cumsum(n_categories)])
    flat = (np.asarray(labels)[:, None] * offsets[-1] + codes + offsets[:-1]).ravel()
    return np.bincount(flat, minlength=k * offsets[-1]).reshape(k, offsets[-1]).astype(float)


def categorical_nb_accuracy(counts, class_count, test_onehot, labels_test, n_categories) -> float:
    """The test accuracy of scikit-learn's ``CategoricalNB(min_categories=n_categories)`` (Laplace
    smoothing, fitted prior) trained on :func:`category_counts` ``counts`` and ``class_count``
    (shape ``(k,)``), its test rows one-hot ``(m, Σ n_i)``. The sparse product adds the features'
    log-probabilities from zero in feature order, as scikit-learn does, so that the predictions,
    ties included, are the same (a test compares them)."""
    offsets = np.concatenate([[0], np.cumsum(n_categories)])
    smoothed = counts + 1.0
    log_prob = np.concatenate(
        [
            np.log(smoothed[:, a:b]) - np.log(smoothed[:, a:b].sum(axis=1, keepdims=True))
            for a, b in zip(offsets[:-1], offsets[1:])
        ],
        axis=1,
    )
    jll = test_onehot @ log_prob.T
    with np.errstate(divide="ignore"):  # a class absent from the training split: log 0, as sklearn
        jll = jll + (np.log(class_count) - np.log(class_count.sum()))
    return float(np.mean(np.argmax(jll, axis=1) == labels_test))


Setting = tuple[str, float, float, str]
"""One cell of a sweep on a categorical data set: ``(protocol, epsilon, theta, budget)``."""


class Runner:
    """Repeated collections on one categorical data set, with what depends on neither protocol,
    ε nor seed computed once (integer codes) and what depends on the seed alone cached (splits,
    non-private accuracy, input choices). Scoring runs on integer codes."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        base = spec_for(dataset, "DE", 1.0)
        self.k = base.n_classes
        self.codes = encode_features(dataset.X, base)
        self.labels = encode_labels(dataset.y, base)
        self.n_categories = [len(f.categories) for f in base.features]
        self.category_offsets = np.concatenate([[0], np.cumsum(self.n_categories)])
        self.input_offsets = np.concatenate([[0], np.cumsum(base.domain_sizes)])
        self._specs: dict[tuple, CollectionSpec] = {}
        self._splits: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
        self._test_rows: tuple[int, np.ndarray] | None = None
        self._histograms: dict[int, np.ndarray] = {}
        self._chosen: dict[tuple[int, int, float | None], tuple[np.ndarray, dict]] = {}
        self._all_counts = category_counts(self.codes, self.labels, self.n_categories, self.k)
        # keys[p, i]: person p's value of input i, offset into one flat histogram of all inputs.
        joint = self.codes * self.k + self.labels[:, None]
        self.keys = np.column_stack([self.labels, joint]) + self.input_offsets[:-1]
        self._fixed: tuple[np.ndarray, np.ndarray] | None = None  # every seed's split, when set

    def on_rows(self, train: np.ndarray, test: np.ndarray) -> Runner:
        """A runner whose every repetition trains on this one's rows ``train`` (repeats allowed: a
        population grown from a sample) and is scored on its rows ``test``, sharing this one's
        encoding (nothing is encoded again)."""
        child = object.__new__(Runner)
        child.__dict__.update(self.__dict__)
        rows = np.concatenate([train, test])
        child.codes, child.labels, child.keys = self.codes[rows], self.labels[rows], self.keys[rows]
        child._all_counts = category_counts(child.codes, child.labels, self.n_categories, self.k)
        child._fixed = (np.arange(len(train)), np.arange(len(train), len(rows)))
        child._splits, child._test_rows, child._histograms, child._chosen = {}, None, {}, {}
        return child

    def spec(self, protocol: str, epsilon: float, theta: float, budget: str) -> CollectionSpec:
        key = (protocol, epsilon, theta, budget)
        if key not in self._specs:
            self._specs[key] = spec_for(self.dataset, protocol, epsilon, theta, budget=budget)
        return self._specs[key]

    def split(self, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Train and test row indices of repetition ``seed`` (the same split as :func:`split`),
        and the non-private accuracy on it."""
        if seed not in self._splits:
            if self._fixed is not None:
                train, test = self._fixed
            else:
                train, test = train_test_split(np.arange(len(self.labels)), test_size=TEST_SIZE, random_state=seed)
            # The training rows' counts are all rows' less the test rows' (a fifth of the work).
            counts = self._all_counts - category_counts(self.codes[test], self.labels[test], self.n_categories, self.k)
            class_count = np.bincount(self.labels[train], minlength=self.k).astype(float)
            accuracy = categorical_nb_accuracy(
                counts, class_count, one_hot(self.codes[test], self.n_categories), self.labels[test], self.n_categories
            )
            self._splits[seed] = (train, test, accuracy)
        return self._splits[seed]

    def _test_matrix(self, seed: int) -> np.ndarray:
        """The test rows' categories one-hot as a dense float64 array ``(m_test, Σ n_i)``, kept for
        the last seed only (connect-4's is 14 MB): scoring every model of a seed is one BLAS product.
        A one-hot row adds the features' log-probabilities in feature order, as the sparse product
        and scikit-learn do (the zeros add nothing), so the predictions, ties included, match."""
        if self._test_rows is None or self._test_rows[0] != seed:
            _, test, _ = self.split(seed)
            rows = np.zeros((len(test), self.category_offsets[-1]))
            np.put_along_axis(rows, self.codes[test] + self.category_offsets[:-1], 1.0, axis=1)
            self._test_rows = (seed, rows)
        return self._test_rows[1]

    def _fast_statistics(self, spec: CollectionSpec, seed: int, rng, class_share=None) -> CollectionStatistics:
        """Fast mode: every input's histogram from one bincount, then each state drawn exactly."""
        train, _, _ = self.split(seed)
        if spec.budget == "one-report":
            # Every cell of a seed draws the same choices first (the seed's generator, the data
            # set's inputs), so their histogram and the generator's state after them are kept:
            # the same draws as choosing again, without indexing every person each run.
            key = (seed, spec.n_inputs, spec.class_share if class_share is None else class_share)
            if key not in self._chosen:
                chosen = choose_inputs(spec, len(train), rng, class_share)
                histogram = np.bincount(self.keys[train, chosen], minlength=self.input_offsets[-1])
                self._chosen[key] = (histogram, rng.bit_generator.state)
            histogram, state = self._chosen[key]
            rng.bit_generator.state = state
        else:
            if seed not in self._histograms:
                self._histograms[seed] = np.bincount(self.keys[train].ravel(), minlength=self.input_offsets[-1])
            histogram = self._histograms[seed]
        stats = CollectionStatistics(spec)
        offsets = self.input_offsets
        stats.states = simulate_states(
            spec.oracles, [histogram[offsets[i] : offsets[i + 1]] for i in range(len(spec.oracles))], rng
        )
        return stats

    def _fast_halves(self, spec: CollectionSpec, train: np.ndarray, rng, class_share=None) -> CollectionStatistics:
        """Fast mode drawn as two halves (:meth:`statistics` with ``halves``): each half's
        histogram from one bincount, its states drawn exactly."""
        if spec.budget == "one-report":
            keys = self.keys[train, choose_inputs(spec, len(train), rng, class_share)][:, None]
        else:
            keys = self.keys[train]
        half = rng.integers(0, 2, len(train)).astype(bool)
        offsets = self.input_offsets
        parts = []
        for h in (False, True):
            histogram = np.bincount(keys[half == h].ravel(), minlength=offsets[-1])
            part = CollectionStatistics(spec)
            part.states = simulate_states(
                spec.oracles, [histogram[offsets[i] : offsets[i + 1]] for i in range(len(spec.oracles))], rng
            )
            parts.append(part)
        return joined(tuple(parts))

    def statistics(
        self,
        setting: Setting,
        seed: int,
        mode: str = "replay",
        class_share: float | None = None,
        dummies: int = 0,
        halves: bool = False,
    ) -> CollectionStatistics:
        """The aggregate of repetition ``seed``'s collection under ``setting``: its training rows
        each send one report (or what the budget says), drawn from ``default_rng(seed)``, the class
        input by a ``class_share`` of them (None: uniform over the inputs), and a shuffler's
        ``dummies`` (:func:`with_dummies`). With ``halves`` the people are split in two by a fair
        coin each and the halves drawn on their own (other draws than without; the same
        distribution), the statistics carrying them (what the ``auto`` estimator needs)."""
        spec = self.spec(*setting)
        train, _, _ = self.split(seed)
        rng = np.random.default_rng(seed)
        if halves and mode == "fast":
            return with_dummies(self._fast_halves(spec, train, rng, class_share), dummies, seed)
        if halves:
            labels = self.labels[train]
            inputs = [labels, *(self.codes[train] * self.k + labels[:, None]).T]
            return with_dummies(halved_collection(spec, inputs, rng, mode, class_share), dummies, seed)
        if mode == "fast":
            return with_dummies(self._fast_statistics(spec, seed, rng, class_share), dummies, seed)
        labels = self.labels[train]
        inputs = [labels, *(self.codes[train] * self.k + labels[:, None]).T]
        return with_dummies(simulate_collection(spec, inputs, rng, mode, class_share), dummies, seed)

    def run(
        self,
        protocol: str,
        epsilon: float,
        seed: int,
        estimators: tuple[str, ...] = ("paper",),
        theta: float = DEFAULT_THETA,
        budget: str = "one-report",
        mode: str = "replay",
        class_share: float | None = None,
        log_loss: bool = False,
        dummies: int = 0,
    ) -> RunResult:
        """Repetition ``seed`` of one setting (:meth:`run_many` with one setting)."""
        setting = (protocol, epsilon, theta, budget)
        return self.run_many([setting], seed, estimators, mode, log_loss, class_share, dummies)[0]

    def run_many(
        self,
        settings: list[Setting],
        seed: int,
        estimators: tuple[str, ...] = ("paper",),
        mode: str = "replay",
        log_loss: bool = False,
        class_share: float | None = None,
        dummies: int = 0,
    ) -> list[RunResult]:
        """Repetition ``seed`` of each of ``settings`` (one :class:`RunResult` each, in order), every
        one the same draws as run alone. They share the seed's split, so every estimator's model of
        every setting is scored on the test rows in one product. Without ``log_loss`` the results'
        ``log_loss`` stays empty (its exponentials cost a third of the scoring). ``class_share``:
        the share of people who report the class input (None: uniform over the inputs);
        ``dummies``: a shuffler's dummy reports added to every collection."""
        train, test, nonprivate = self.split(seed)
        # Without log-loss only predictions are scored, which no temperature changes.
        temperature = None if log_loss else 1.0
        # The auto estimator chooses from the reports' halves: every estimator then sees the same
        # collection, drawn as two halves.
        halves = "auto" in estimators
        models = [
            build_model(self.statistics(setting, seed, mode, class_share, dummies, halves), name, temperature)
            for setting in settings
            for name in estimators
        ]
        accuracy, losses = self._score(models, seed, log_loss)
        majority_accuracy = float(np.bincount(self.labels[test], minlength=self.k).max() / len(test))  # the best constant
        constant = prior_log_loss(self.labels[train], self.labels[test]) if log_loss else float("nan")
        results, e = [], len(estimators)
        for s in range(len(settings)):
            results.append(
                RunResult(
                    seed,
                    {name: float(accuracy[s * e + j]) for j, name in enumerate(estimators)},
                    nonprivate,
                    len(train),
                    majority_accuracy,
                    {name: float(losses[s * e + j]) for j, name in enumerate(estimators)} if log_loss else {},
                    constant,
                )
            )
        return results

    def _score(self, models: list, seed: int, log_loss: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Test accuracy and log-loss (nats per record, at each model's temperature; None without
        ``log_loss``) of each of ``models`` on repetition ``seed``'s test rows; arrays of shape
        ``(len(models),)``."""
        rows = self._test_matrix(seed)
        labels = self.labels[self.split(seed)[1]]
        m, k, n = len(labels), self.k, len(models)
        # Columns ordered (class, model), so that what runs over the classes below runs over
        # contiguous rows of models rather than along a short last axis.
        tables = np.empty((rows.shape[1], k, n))
        priors = np.empty((k, n))
        for j, model in enumerate(models):
            tables[:, :, j] = np.concatenate(model.feature_log_prob, axis=1).T
            priors[:, j] = model.class_log_prior
        jll = (rows @ tables.reshape(-1, k * n)).reshape(m, k, n) + priors
        own = jll[np.arange(m), labels]  # (m, n)
        # Right when the true class scores highest and no class before it ties (argmax's first).
        correct = np.ones((m, n), dtype=bool)
        for c in range(k):
            earlier = (labels > c)[:, None]
            correct &= np.where(earlier, own > jll[:, c], own >= jll[:, c])
        if not log_loss:
            return correct.mean(axis=0), None
        jll *= np.array([getattr(model, "temperature", 1.0) for model in models])
        own = jll[np.arange(m), labels]
        top = jll.max(axis=1)
        normaliser = top + np.log(np.exp(jll - top[:, None]).sum(axis=1))
        return correct.mean(axis=0), (normaliser - own).mean(axis=0)


_RUNNERS: dict[int, Runner] = {}


def runner_for(dataset: Dataset) -> Runner:
    """The (cached) :class:`Runner` of ``dataset``."""
    key = id(dataset)
    if key not in _RUNNERS or _RUNNERS[key].dataset is not dataset:
        _RUNNERS[key] = Runner(dataset)
    return _RUNNERS[key]


def run_grown(
    sample: Dataset,
    people: int,
    protocol: str,
    epsilon: float,
    seed: int,
    estimators: tuple[str, ...] = ("normsub",),
    setup: Setup | None = None,
    mode: str = "fast",
    class_share: float | None = None,
    dummies: int = 0,
) -> RunResult:
    """Repetition ``seed`` of a collection of ``people`` participants drawn with replacement from
    the training rows of ``sample``'s split ``seed``, scored on that split's test rows, which no
    draw takes: what the sample holds by chance is not scored as signal the people have. The
    other arguments as :func:`run_once` (accuracy alone is scored)."""
    train, test = train_test_split(np.arange(len(sample.y)), test_size=TEST_SIZE, random_state=seed)
    drawn = np.random.default_rng([seed, 1]).choice(train, size=people)
    if not sample.continuous:
        runner = runner_for(sample).on_rows(drawn, test)
        return runner.run(protocol, epsilon, seed, estimators, mode=mode, class_share=class_share, dummies=dummies)
    X_train, X_test, y_train, y_test = sample.X[drawn], sample.X[test], sample.y[drawn], sample.y[test]
    spec = spec_for(sample, protocol, epsilon, DEFAULT_THETA, setup, X_train, y_train)
    halves = "auto" in estimators
    stats = with_dummies(collect(spec, X_train, y_train, np.random.default_rng(seed), mode, class_share, halves), dummies, seed)
    return scored(spec, stats, seed, estimators, X_train, X_test, y_train, y_test)


def run_with_spec(
    spec: CollectionSpec,
    dataset: Dataset,
    seed: int,
    estimators: tuple[str, ...] = ("normsub",),
    mode: str = "replay",
    log_loss: bool = False,
) -> RunResult:
    """One repetition of the collection ``spec`` describes (the very spec a service accepts) on
    ``dataset``: a random 80/20 split, every training row one participant; with ``log_loss`` the
    test log-losses too."""
    X_train, X_test, y_train, y_test = split(dataset, seed)
    stats = collect(spec, X_train, y_train, np.random.default_rng(seed), mode, halves="auto" in estimators)
    return scored(spec, stats, seed, estimators, X_train, X_test, y_train, y_test, log_loss)
