"""Whether a model learned anything: its accuracy against the constant classifier's, and, when it
is no better, how many people a collection would need for it to be.

Every accuracy the simulator prints stands beside the best constant classifier's on the same test
rows: always answering their most common class, which no constant beats there (the training
split's majority can score less, so that a model without signal would pass it by chance). A model
that does not beat it by more than one standard error of the paired difference (over the repetitions; with one repetition, the binomial error of the test
accuracy) learned nothing a reader should rely on, and the output says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Collections simulated per population size when searching for the people a collection needs,
# and the sizes tried, as multiples of the data set's training split.
PEOPLE_REPS = 10
PEOPLE_FACTORS = (4, 16, 64, 256)


@dataclass(frozen=True)
class Verdict:
    """The model's mean accuracy gain over the constant classifier and its standard error."""

    gain: float
    se: float

    @property
    def learned(self) -> bool:
        """Whether the model beats the constant classifier by more than one standard error."""
        return self.gain > self.se


def verdict(accuracy, majority, n_test: int) -> Verdict:
    """The :class:`Verdict` of paired per-repetition accuracies (``accuracy``, ``majority``, equal
    lengths) on test splits of ``n_test`` rows."""
    diff = np.asarray(accuracy, dtype=float) - np.asarray(majority, dtype=float)
    if len(diff) > 1:
        se = float(diff.std(ddof=1) / np.sqrt(len(diff)))
    else:  # one split: the test accuracy's own binomial error
        p = float(np.clip(np.mean(accuracy), 1e-9, 1 - 1e-9))
        se = float(np.sqrt(p * (1 - p) / max(n_test, 1)))
    return Verdict(float(diff.mean()), se)


def people_needed(data, protocol: str, epsilon, estimator: str, setup=None, seed: int = 0) -> int | None:
    """The fewest people (among the training split times :data:`PEOPLE_FACTORS`) whose simulated
    collections (fast mode, :data:`PEOPLE_REPS` each) give a model that beats the constant
    classifier by more than one standard error; None when none of them does (more people do not
    help at this ε, or not within 256 times the data). Each repetition splits ``data`` 80/20 as
    ``sim plan`` does, draws the people with replacement from its training rows alone and scores on
    its test rows (:func:`~sim.experiment.run_grown`): a dependence the sample holds by chance is
    not one the people have. ``epsilon`` is each person's ε, or a function of the number of
    people giving it, or giving how they are shuffled (a :class:`~sim.cli_options.Shuffled`: a
    larger collection reports at a larger local ε, with more dummies)."""
    from .experiment import run_grown, test_rows

    for factor in PEOPLE_FACTORS:
        people = int(len(data.y) * 0.8 * factor)
        local = epsilon(people) if callable(epsilon) else epsilon
        dummies = 0
        if hasattr(local, "dummies"):
            local, dummies = local.local, local.dummies
        runs = [
            run_grown(data, people, protocol, local, seed + r, (estimator,), setup=setup, dummies=dummies)
            for r in range(PEOPLE_REPS)
        ]
        found = verdict([r.accuracy[estimator] for r in runs], [r.majority_accuracy for r in runs], test_rows(round(len(data.y) * 0.8)))
        if found.learned:
            return people
    return None


def describe(found: Verdict, needed: int | None = None, searched: bool = False) -> str | None:
    """The one line saying the model learned nothing, or None when it did."""
    if found.learned:
        return None
    line = (
        f"  the model does not beat the best constant classifier on the test rows ({found.gain:+.4f} ± {found.se:.4f}): "
        "it learned nothing to rely on"
    )
    if searched:
        if needed is None:
            line += f"; more people would not help at this epsilon (tried up to {PEOPLE_FACTORS[-1]}x)"
        else:
            line += f"; with about {needed:,} people it would (python -m sim plan simulates such collections)"
    return line
