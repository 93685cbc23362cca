"""Why no rule reading the reports can choose the estimator that classifies better: two
populations that send the same reports, on which ``paper`` and ``normsub`` swap places.

    python research/choice_bound.py [--runs 1000] [--pilot 2000] [--row-runs 300]

Each person reports one input (the class, or one feature jointly with the class), so how a
collection's reports are distributed depends on the population only through its per-input
marginals ``P(c)`` and ``P(a_i, c)``. Two populations with those marginals equal send identically
distributed reports; every estimator's model, and every rule's choice, is then identically
distributed on both, while a classifier's accuracy depends on how the features depend on one
another given the class.

The populations: two classes, six binary features, marginals those of a conditionally independent
population whose ``P(c)`` is drawn from Dirichlet(5, 5) and each ``P(a_i | c)`` from Dirichlet(1, 1)
(generator seed :data:`MARGINAL_SEED`). On :data:`PILOT` runs (seeds 10,000 on) one linear
programme (:func:`searched_pair`) finds, among all pairs of joint distributions with those
marginals, the pair (``J+``, ``J−``) on which the bound below is largest: ``paper`` better on
``J+``, ``normsub`` on ``J−``, and no choice made run by run from the reports good on both.
They are then measured on other seeds (0 on):

- *the same reports*: each run draws one collection from the shared marginals (each person's
  input by :func:`participant.reporting.choose_inputs`, its value from that input's marginal, the
  people split in halves by a fair coin, each half's states drawn exactly by
  :func:`protocols.simulate_states`, as ``sim``'s fast mode does), fits ``normsub``, ``paper`` and
  ``ibu`` with :func:`aggregator.estimation.estimators.build_model` and lets ``auto`` choose; every
  model's exact accuracy (``Σ_x Σ_c J(x, c) · 1[argmax = c]`` over all 64 feature vectors) is then
  computed on ``J+``, ``J−`` and the conditionally independent population. These reports could have
  come from any of the three, so any rule's choice on them is the same for all three.
- *drawn from rows*: as a check of that premise, separate runs draw each population's people as
  rows and collect them with :func:`sim.experiment.halved_collection` (fast mode), so that the
  gap and ``auto``'s picks can be compared between populations that are sampled apart.

The bound: on the same reports ``r``, a rule that picks candidate ``j(r)`` falls short of the better
estimator on ``J+`` by ``S+ = E[acc_better+(r) − acc_j(r)(r; J+)]`` and on ``J−`` by ``S−`` likewise;
``S+ + S− ≥ E[L]`` with ``L(r) = acc_better+(r; J+) + acc_better−(r; J−) − max_j (acc_j(r; J+) +
acc_j(r; J−))`` (the best any rule could do knowing both populations but seeing only the reports),
so on one of the two populations every rule is below the better estimator by at least ``E[L] / 2``.
The table goes to ``research/results/choice_bound.md``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

from aggregator import CollectionStatistics
from aggregator.estimation.estimators import build_model, estimator_choice
from participant import CollectionSpec, Feature
from participant.reporting import choose_inputs
from protocols import simulate_states
from sim.experiment import halved_collection, joined

TABLE = Path(__file__).with_name("results") / "choice_bound.md"
ESTIMATORS = ("normsub", "paper", "ibu")
K = 2
CATEGORIES = (2, 2, 2, 2, 2, 2)
MARGINAL_SEED = 12
# (people, ε): one collection of 1,000 people at ε 2 (the study's "large" threshold) and a small one.
SETTINGS = ((1000, 2.0), (200, 4.0))
PILOT_SEED = 10_000
PILOT = 2000
RUNS = 1000
ROW_RUNS = 300


def spec_of(categories, k: int, epsilon: float) -> CollectionSpec:
    """The collection's spec: features ``f0 …`` with values ``v0 …``, classes ``c0 …``, protocol
    ``auto`` (DE for these domains), one report per person at ``epsilon``."""
    features = [Feature(f"f{i}", tuple(f"v{v}" for v in range(n))) for i, n in enumerate(categories)]
    return CollectionSpec(features, tuple(f"c{c}" for c in range(k)), "auto", epsilon, theta=None)


def feature_vectors(categories) -> np.ndarray:
    """Every feature vector, shape ``(Π n_i, F)``, in the row-major order of a joint array."""
    return np.indices(categories).reshape(len(categories), -1).T


def conditionally_independent(prior: np.ndarray, conditionals, categories) -> np.ndarray:
    """The joint ``P(x, c) = P(c) Π_i P(x_i | c)``, shape ``(*categories, k)``; ``conditionals[i]``
    is ``P(a | c)`` of feature ``i``, shape ``(k, n_i)``."""
    codes = feature_vectors(categories)
    flat = np.tile(prior, (len(codes), 1))
    for i, table in enumerate(conditionals):
        flat = flat * table[:, codes[:, i]].T
    return flat.reshape(tuple(categories) + (len(prior),))


def base_population(seed: int = MARGINAL_SEED, categories=CATEGORIES, k: int = K) -> np.ndarray:
    """The conditionally independent population whose marginals both searched ones share:
    ``P(c)`` from Dirichlet(5, …), each ``P(a_i | c)`` from Dirichlet(1, …), drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    prior = rng.dirichlet(np.full(k, 5.0))
    conditionals = [rng.dirichlet(np.ones(n), size=k) for n in categories]
    return conditionally_independent(prior, conditionals, categories)


def input_marginals(joint: np.ndarray) -> list[np.ndarray]:
    """What one report can carry, per input, as probabilities in the estimates' layout: ``P(c)``
    (shape ``(k,)``), then for each feature ``P(a_i, c)`` at index ``a·k + c`` (shape ``(n_i·k,)``)."""
    features = joint.ndim - 1
    out = [joint.sum(axis=tuple(range(features)))]
    for i in range(features):
        out.append(joint.sum(axis=tuple(a for a in range(features) if a != i)).ravel())
    return out


def exact_accuracy(model, joint: np.ndarray) -> float:
    """The share of the population ``joint`` whose class ``model`` predicts (its most probable
    class; the first of ties, as the benchmarks score): ``Σ_x Σ_c J(x, c) · 1[argmax = c]``."""
    codes = feature_vectors(joint.shape[:-1])
    predicted = np.argmax(model.joint_log_likelihood_codes(codes), axis=1)
    return float(joint.reshape(len(codes), -1)[np.arange(len(codes)), predicted].sum())


def shared_collection(spec: CollectionSpec, marginals, people: int, rng) -> CollectionStatistics:
    """One collection of ``people`` from any population with these per-input ``marginals``: each
    person's input chosen as participants choose it, its value drawn from that input's marginal,
    the people split in halves by a fair coin and each half's states drawn exactly (the
    statistics carry the halves, for ``auto``)."""
    chosen = choose_inputs(spec, people, rng)
    half = rng.integers(0, 2, people)
    parts = []
    for h in (0, 1):
        counts = np.bincount(chosen[half == h], minlength=spec.n_inputs)
        histograms = [rng.multinomial(m, p / p.sum()) for m, p in zip(counts, marginals)]
        part = CollectionStatistics(spec)
        part.states = simulate_states(spec.oracles, histograms, rng)
        parts.append(part)
    return joined(tuple(parts))


def row_collection(spec: CollectionSpec, joint: np.ndarray, people: int, rng) -> CollectionStatistics:
    """One collection of ``people`` rows drawn from ``joint``, collected as ``sim`` collects a data
    set's training rows (:func:`sim.experiment.halved_collection`, fast mode)."""
    k = joint.shape[-1]
    cell = rng.choice(joint.size, size=people, p=joint.ravel() / joint.sum())
    codes, labels = feature_vectors(joint.shape[:-1])[cell // k], cell % k
    inputs = [labels, *(codes * k + labels[:, None]).T]
    return halved_collection(spec, inputs, rng, mode="fast")


def fitted(stats: CollectionStatistics) -> tuple[list, str]:
    """The models of :data:`ESTIMATORS` (temperature 1: it changes no prediction) and ``auto``'s pick."""
    return [build_model(stats, name, temperature=1.0) for name in ESTIMATORS], estimator_choice(stats.halves).chosen


def predictions(models, codes: np.ndarray) -> np.ndarray:
    """Each model's predicted class of every feature vector, shape ``(len(models), len(codes))``."""
    return np.stack([np.argmax(m.joint_log_likelihood_codes(codes), axis=1) for m in models])


def accuracies(predicted: np.ndarray, joint: np.ndarray) -> np.ndarray:
    """Exact accuracies on ``joint`` of integer class predictions ``predicted`` (shape ``(..., Π n_i)``,
    feature vectors in :func:`feature_vectors` order): shape ``predicted.shape[:-1]``."""
    flat = joint.reshape(predicted.shape[-1], -1)
    return flat[np.arange(predicted.shape[-1]), predicted].sum(axis=-1)


def shared_runs(spec: CollectionSpec, marginals, people: int, seeds) -> tuple[np.ndarray, np.ndarray]:
    """Per run (one per seed, :func:`shared_collection`), every estimator's predicted class of
    every feature vector (shape ``(runs, estimators, Π n_i)``) and ``auto``'s pick (an index into
    :data:`ESTIMATORS`, shape ``(runs,)``)."""
    codes = feature_vectors([len(f.categories) for f in spec.features])
    out, picks = [], []
    for seed in seeds:
        models, pick = fitted(shared_collection(spec, marginals, people, np.random.default_rng(seed)))
        out.append(predictions(models, codes))
        picks.append(ESTIMATORS.index(pick))
    return np.array(out), np.array(picks)


def marginal_constraints(categories, k: int) -> np.ndarray:
    """The rows ``A`` with ``A @ J.ravel()`` every feature's ``P(a_i = a, c)`` in the estimates'
    layout (feature after feature, index ``a·k + c``): shape ``(Σ n_i·k, Π n_i·k)``."""
    codes = feature_vectors(categories)
    rows = []
    for i, n in enumerate(categories):
        for a in range(n):
            for c in range(k):
                row = np.zeros(len(codes) * k)
                row[np.flatnonzero(codes[:, i] == a) * k + c] = 1.0
                rows.append(row)
    return np.array(rows)


def searched_pair(predicted: np.ndarray, marginals, categories, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The two joints ``(J+, J−)`` (each shape ``(*categories, k)``) with these per-input
    ``marginals`` that maximise, over the runs' ``predicted`` classes (shape ``(runs, estimators,
    Π n_i)``, :data:`ESTIMATORS` order), the mean of ``L = min_j [(acc_paper − acc_j)(J+) +
    (acc_normsub − acc_j)(J−)]``: what even the best per-run choice loses against ``paper`` on J+
    and ``normsub`` on J− together. One linear programme (``L`` of each run a variable below each
    of its candidates' lines); a vertex, so each joint holds few cells."""
    from scipy import sparse
    from scipy.optimize import linprog

    runs, estimators, vectors = predicted.shape
    size = vectors * k
    onehot = np.eye(k)[predicted].reshape(runs, estimators, size)
    paper, normsub = ESTIMATORS.index("paper"), ESTIMATORS.index("normsub")
    # Row (r, j): L_r − (paper − j)·J+ − (normsub − j)·J− ≤ 0.
    plus = (onehot[:, [paper]] - onehot).reshape(runs * estimators, size)
    minus = (onehot[:, [normsub]] - onehot).reshape(runs * estimators, size)
    pick = sparse.kron(sparse.eye(runs), np.ones((estimators, 1)))
    upper = sparse.hstack([sparse.csr_matrix(-plus), sparse.csr_matrix(-minus), pick]).tocsr()
    A = marginal_constraints(categories, k)
    b = np.concatenate(marginals[1:])
    equal = sparse.block_diag([A, A]).tocsc()
    equal = sparse.hstack([equal, sparse.csr_matrix((equal.shape[0], runs))])
    cost = np.concatenate([np.zeros(2 * size), -np.ones(runs) / runs])
    bounds = [(0, None)] * (2 * size) + [(None, None)] * runs
    found = linprog(cost, A_ub=upper, b_ub=np.zeros(runs * estimators), A_eq=equal, b_eq=np.concatenate([b, b]),
                    bounds=bounds, method="highs")  # fmt: skip
    if not found.success:
        raise RuntimeError(f"the linear programme failed: {found.message}")
    joints = np.clip(found.x[: 2 * size], 0.0, None).reshape(2, *categories, k)
    return joints[0], joints[1]


def dependence(joint: np.ndarray) -> float:
    """How far the features are from independent given the class: the total correlation
    ``Σ_c P(c) (Σ_i H(X_i | c) − H(X | c))``, in bits (0 for a conditionally independent population)."""

    def entropy(p):
        p = p[p > 0]
        return float(-(p * np.log2(p)).sum())

    features, total = joint.ndim - 1, 0.0
    prior = joint.sum(axis=tuple(range(features)))
    for c, share in enumerate(prior):
        given = joint[..., c] / share
        singles = sum(entropy(given.sum(axis=tuple(a for a in range(features) if a != i))) for i in range(features))
        total += share * (singles - entropy(given.ravel()))
    return total


def mean_se(x: np.ndarray) -> tuple[float, float]:
    """The mean of ``x`` over runs and its standard error."""
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x)))


def fmt(pair: tuple[float, float]) -> str:
    return f"{pair[0]:+.4f} ± {pair[1]:.4f}"


def setting_lines(people: int, epsilon: float, pilot: int, runs: int, row_runs: int) -> list[str]:
    """The tables of one (people, ε) setting."""
    warnings.simplefilter("ignore")
    spec = spec_of(CATEGORIES, K, epsilon)
    base = base_population()
    marginals = input_marginals(base)
    found, _ = shared_runs(spec, marginals, people, range(PILOT_SEED, PILOT_SEED + pilot))
    plus, minus = searched_pair(found, marginals, CATEGORIES, K)
    populations = {"J+": plus, "J−": minus, "independent": base}
    apart = max(np.abs(a - b).max() for J in populations.values() for a, b in zip(input_marginals(J), marginals))

    predicted, picks = shared_runs(spec, marginals, people, range(runs))
    acc = {name: accuracies(predicted, J) for name, J in populations.items()}  # (runs, estimators)
    lines = [
        f"### {people:,} people, ε {epsilon:g} (protocol {spec.protocol}: {', '.join(sorted(set(spec.protocols.values())))})",
        "",
        (
            f"*The same reports*: {runs} runs (seeds 0–{runs - 1}); populations searched on {pilot} other runs "
            f"(seeds {PILOT_SEED:,}–{PILOT_SEED + pilot - 1:,}). Their per-input marginals differ by at most {apart:.1e}."
        ),
        "",
        "| population | dependence given the class (bits) | cells held | normsub | paper | ibu | auto | paper − normsub | auto − better |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    better = {}
    for name, J in populations.items():
        a = acc[name]
        auto = a[np.arange(runs), picks]
        gap = mean_se(a[:, 1] - a[:, 0])
        better[name] = 1 if gap[0] > 0 else 0
        means = " | ".join(f"{x:.4f}" for x in (*a.mean(axis=0), auto.mean()))
        lines.append(
            f"| {name} | {abs(dependence(J)):.3f} | {int((J > 1e-12).sum())} of {J.size} | {means} | {fmt(gap)} | "
            f"{fmt(mean_se(auto - a[:, better[name]]))} |"
        )
    plus, minus = acc["J+"], acc["J−"]
    best_joint = (plus + minus).max(axis=1)
    bound = mean_se((plus[:, better["J+"]] + minus[:, better["J−"]] - best_joint) / 2)
    counts = np.bincount(picks, minlength=len(ESTIMATORS))
    lines += [
        "",
        "auto's picks (the same on every population: the same reports): "
        + ", ".join(f"{name} {c}" for name, c in zip(ESTIMATORS, counts))
        + ".",
        "",
        (
            f"**Bound**: on J+ or on J−, every rule that reads only the reports is below the better estimator by at least "
            f"**{fmt(bound)}** (half the mean over runs of what even the best choice per run, knowing both populations, "
            "loses on the two together)."
        ),
    ]
    if row_runs:
        lines += [
            "",
            (
                f"*Drawn from rows* (the premise checked): {row_runs} runs per population (seeds {2 * PILOT_SEED:,}–"
                f"{2 * PILOT_SEED + row_runs - 1:,}, the same seeds for both), people drawn as rows and collected with "
                "`sim.experiment.halved_collection`."
            ),
            "",
            "| population | paper − normsub | auto picks normsub / paper / ibu |",
            "|---|---|---|",
        ]
        codes = feature_vectors(CATEGORIES)
        for name in ("J+", "J−"):
            J, gaps, chosen = populations[name], [], []
            for seed in range(2 * PILOT_SEED, 2 * PILOT_SEED + row_runs):
                models, pick = fitted(row_collection(spec, J, people, np.random.default_rng(seed)))
                a = accuracies(predictions(models, codes), J)
                gaps.append(a[1] - a[0])
                chosen.append(ESTIMATORS.index(pick))
            counts = np.bincount(chosen, minlength=len(ESTIMATORS))
            lines.append(f"| {name} | {fmt(mean_se(np.array(gaps)))} | {' / '.join(map(str, counts))} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="runs on the same reports per setting")
    parser.add_argument("--pilot", type=int, default=PILOT, help="runs the populations are searched on")
    parser.add_argument("--row-runs", type=int, default=ROW_RUNS, help="runs per population drawn from rows (0: none)")
    args = parser.parse_args()
    if min(args.runs, args.pilot) < 2 or args.row_runs < 0:
        parser.error("--runs and --pilot need at least 2 runs, --row-runs at least 0")
    lines = [
        (
            f"# Two populations that send the same reports (`python research/choice_bound.py --runs {args.runs} "
            f"--pilot {args.pilot} --row-runs {args.row_runs}`)"
        ),
        "",
        (
            f"Two classes, six binary features; marginals of a conditionally independent population drawn from seed "
            f"{MARGINAL_SEED} (*independent*); J+ and J− share them exactly and are the pair of joints, searched on the "
            "pilot runs by one linear programme, on which the bound below is largest. Accuracies are exact (every feature vector "
            "weighed by its probability), so the only noise is the reports'; ± one standard error over the runs. "
            "*better*: the better of normsub and paper on that population (by the means); *dependence*: the total "
            "correlation of the features given the class; *cells held*: (feature vector, class) pairs with positive "
            "probability."
        ),
        "",
    ]
    for people, epsilon in SETTINGS:
        lines += setting_lines(people, epsilon, args.pilot, args.runs, args.row_runs)
    text = "\n".join(lines)
    TABLE.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
