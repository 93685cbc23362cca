"""``python -m sim plan``: before a collection, which share of the people should report the class.

Each person reports one input, by default chosen uniformly, so one person in ``n + 1`` reports the
class. Where the classes are uneven and ε is small, the reports can then name another class the
most common, and the model falls below the constant classifier (documentation, *Reporting the class
more often*); where the features decide, a larger class share costs them reports. Which effect
wins depends on the data, so the plan simulates it: collections of a sample the operator holds
(public, or a pilot: never the reports), each repetition one random 80/20 split, at the uniform
choice and at every candidate share on the same splits, and keeps a share only where its model
beats the uniform choice's by more than two standard errors of the paired difference.

The plan reads the sample, not anyone's report, and the share it picks is published in the spec
before anyone reports: every device draws its input from the spec alone, so the share changes
neither what a report reveals nor what it spends.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np

from participant.spec import EPSILON_RANGE
from participant.usage import Parser, folded, non_negative_int, number, positive_int
from protocols import PROTOCOL_NAMES

from .cli_options import (
    add_central_options,
    add_csv_options,
    check_common,
    csv_source,
    load_data,
    shuffled_for,
    training_people,
)
from .datasets import Dataset, dataset_names

SHARES = (0.25, 0.4, 0.55, 0.7)
# Standard errors of the paired gain a share must clear: with four candidates, a share that helps
# nowhere is picked by chance in under 10 % of plans (one-sided 2.3 % each).
Z = 2.0


@dataclass(frozen=True)
class ShareForecast:
    """One candidate: its ``share`` (None: the uniform choice) and, per repetition (shape
    ``(reps,)``), the model's accuracy and the best constant's on the test rows."""

    share: float | None
    accuracy: np.ndarray
    majority: np.ndarray

    def gain(self, uniform: ShareForecast) -> tuple[float, float]:
        """The mean paired accuracy gain over ``uniform`` and its standard error."""
        diff = self.accuracy - uniform.accuracy
        return float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else np.inf


@dataclass(frozen=True)
class SharePlan:
    """Every candidate's :class:`ShareForecast` (the uniform choice first), the ``chosen`` share
    (None: keep the uniform choice), the uniform choice's share ``1/(n + 1)`` and the number of
    ``people`` each simulated collection has."""

    forecasts: list[ShareForecast]
    chosen: float | None
    uniform_share: float
    people: int


def choose(forecasts: list[ShareForecast], z: float = Z) -> float | None:
    """The share whose mean accuracy is highest among those that beat the uniform choice
    (``forecasts[0]``) by more than ``z`` standard errors of the paired gain; None if none does."""
    uniform, best, chosen = forecasts[0], -np.inf, None
    for forecast in forecasts[1:]:
        mean, se = forecast.gain(uniform)
        if mean > z * se and mean > best:
            best, chosen = mean, forecast.share
    return chosen


def plan_class_share(
    sample: Dataset,
    protocol: str,
    epsilon: float,
    shares=SHARES,
    reps: int = 100,
    seed: int = 0,
    setup=None,
    estimator: str = "normsub",
    people: int | None = None,
    z: float = Z,
    progress: bool = False,
    dummies: int = 0,
    first=None,
) -> SharePlan:
    """The :class:`SharePlan` for a collection under ``protocol`` at ``epsilon`` (one report per
    person) of a population like ``sample``: ``reps`` repetitions (seeds ``seed, seed + 1, …``,
    fast mode) at the uniform choice and each of ``shares``, scored with ``estimator``; with
    ``people``, of that many participants drawn from each split's training rows and scored on its
    test rows (:func:`~sim.experiment.run_grown`), else of the
    sample's own training splits; with ``dummies``, a shuffler's dummy reports in each collection.
    ``first(uniform, people)``, if given, is called with the uniform choice's forecast before any
    share is simulated (and before the progress bar): what the plan says first."""
    from tqdm import tqdm

    from .experiment import run_grown, run_once, spec_for

    estimators = (estimator,)
    candidates = [None, *shares]
    forecasts = []
    bar = None
    n_train = 0
    for share in candidates:
        if share is not None and bar is None:  # the uniform choice first, then a bar for the shares
            if first is not None:
                first(forecasts[0], n_train)
            bar = tqdm(total=len(shares) * reps, desc=f"{sample.name} eps={epsilon:g}", unit="run", delay=1.0,
                       disable=not progress)  # fmt: skip
        runs = []
        for r in range(reps):
            options = {"setup": setup, "mode": "fast", "class_share": share, "dummies": dummies}
            if people is None:
                # Accuracy alone is compared, so the models skip the temperature's bootstrap.
                runs.append(run_once(sample, protocol, epsilon, seed + r, estimators, log_loss=False, **options))
            else:
                runs.append(run_grown(sample, people, protocol, epsilon, seed + r, estimators, **options))
            if bar is not None:
                bar.update()
        n_train = runs[0].n_train
        forecasts.append(
            ShareForecast(
                share,
                np.array([run.accuracy[estimator] for run in runs]),
                np.array([run.majority_accuracy for run in runs]),
            )
        )
    if bar is not None:
        bar.close()
    elif first is not None:  # no shares asked: what the plan says first is all it says
        first(forecasts[0], n_train)
    uniform_share = 1.0 / spec_for(sample, "DE", 1.0, setup=setup).n_inputs
    return SharePlan(forecasts, choose(forecasts, z), uniform_share, n_train)


@dataclass(frozen=True)
class PeopleVerdict:
    """How many people a collection needs, as one line for the plan's first and as JSON fields."""

    line: str
    fields: dict


def people_line(sample: Dataset, args, setup, uniform: ShareForecast, people: int, shuffled) -> PeopleVerdict:
    """Whether the uniform choice's collections of ``people`` (its forecast ``uniform``) beat the
    best constant on their test rows; when they do not, the people a collection would need
    (:func:`sim.verdict.people_needed`, simulated as the plan simulates, None when more people
    were not shown to help)."""
    from .experiment import test_rows
    from .verdict import PEOPLE_FACTORS, people_needed, verdict

    found = verdict(uniform.accuracy, uniform.majority, test_rows(people))
    fields = {"beats_constant": found.learned, "gain_over_constant": found.gain, "gain_over_constant_se": found.se}
    if found.learned:
        line = (
            f"people: {people:,} are enough; the model beats the best constant classifier by "
            f"{found.gain:+.3f} ± {found.se:.3f}"
        )
        return PeopleVerdict(line, fields)
    epsilon = args.eps
    if shuffled is not None:  # a larger collection may report at a larger local ε
        epsilon = lambda people: shuffled_for(args.central_eps, people, args.delta, args.dummies, args.flooded_eps)  # noqa: E731
    needed = people_needed(sample, args.protocol, epsilon, "normsub", setup, args.seed)
    fields["people_needed"] = needed
    if needed is None:
        line = (
            f"people: with {people:,} the model does not beat the best constant classifier, and more people "
            f"were not shown to help at this epsilon (none confirmed up to {PEOPLE_FACTORS[-1]}x)"
        )
    else:
        line = f"people: about {needed:,} needed; with {people:,} the model does not beat the best constant classifier"
    return PeopleVerdict(line, fields)


def describe(plan: SharePlan, estimator: str) -> list[str]:
    """The plan as text lines: one per candidate, then the choice."""
    uniform = plan.forecasts[0]
    lines = [f"  {'class share':<17} {estimator:>8} {'vs uniform':>16} {'best constant':>15}"]
    for forecast in plan.forecasts:
        if forecast.share is None:
            label, versus = f"uniform ({plan.uniform_share:.3f})", ""
        else:
            mean, se = forecast.gain(uniform)
            label, versus = f"{forecast.share:g}", f"{mean:+.3f} ± {se:.3f}"
        lines.append(f"  {label:<17} {forecast.accuracy.mean():>8.3f} {versus:>16} {forecast.majority.mean():>15.3f}")
    if plan.chosen is None:
        lines.append("plan: keep the uniform choice (no share beats it by two standard errors)")
    else:
        mean, se = next(f for f in plan.forecasts if f.share == plan.chosen).gain(uniform)
        lines.append(
            f'plan: "class_share": {plan.chosen:g} in the spec ({mean:+.3f} ± {se:.3f} over the uniform choice); '
            f"python -m aggregator spec ... --class-share {plan.chosen:g} writes it"
        )
    return lines


def shares_list(text: str) -> list[float]:
    """An argparse type: comma-separated class shares, each in (0, 1)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or not all(0 < v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"every share must lie in (0, 1), got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m sim plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        epilog="example:\n  python -m sim plan --dataset car --eps 0.5\n"
        "  python -m sim plan --csv pilot.csv --label outcome --eps 1 --people 5000",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=dataset_names(), help="a UCI data set of the paper as the sample")
    source.add_argument(
        "--csv", type=csv_source, metavar="FILE[:LABEL]", help="your sample: a CSV file (see the data options)"
    )
    parser.add_argument("--data-dir", metavar="DIR", help="folder holding the UCI files")
    add_csv_options(parser)
    parser.add_argument(
        "--protocol", type=folded(PROTOCOL_NAMES), choices=list(PROTOCOL_NAMES), default="auto",
        help="frequency oracle (default auto)",
    )
    parser.add_argument("--eps", type=number(*EPSILON_RANGE), help="epsilon each person spends on their one report (default 1)")
    add_central_options(parser)
    parser.add_argument(
        "--people",
        type=positive_int,
        help="participants you expect (default: the sample's training split, 80%% of its rows); the sample is "
        "resampled to that many",
    )
    parser.add_argument(
        "--shares", type=shares_list, default=list(SHARES), help="class shares to try (default 0.25,0.4,0.55,0.7)"
    )
    parser.add_argument("--reps", type=positive_int, default=100, help="simulated collections per share (default 100)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the first repetition (default 0)")
    parser.add_argument(
        "--bins", type=number(2, whole=True), help="bins per coordinate of a continuous sample (default: the paper's, else 4)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_common(parser, args)
    if args.reps < 2:
        parser.error("--reps must be at least 2: the plan weighs paired differences by their standard error")
    from .experiment import Setup  # scikit-learn: not for --help or a refused option

    sample = load_data(parser, args)
    if not sample.continuous and args.bins:
        parser.error(f"{sample.name} is categorical: --bins applies to continuous data")
    setup = Setup(bins=args.bins) if sample.continuous else None
    shuffled = None
    if args.central_eps is not None:
        if args.eps is not None:
            parser.error("--eps and --central-eps: give one (with --central-eps each person's epsilon follows)")
        people = args.people or training_people(sample)
        shuffled = shuffled_for(args.central_eps, people, args.delta, args.dummies, args.flooded_eps)
        args.eps = shuffled.local
    elif args.delta is not None or args.flooded_eps is not None or args.dummies is not None:
        parser.error("--delta, --flooded-eps and --dummies go with --central-eps")
    args.eps = 1.0 if args.eps is None else args.eps
    said: list[PeopleVerdict] = []

    def first(uniform: ShareForecast, count: int) -> None:
        said.append(people_line(sample, args, setup, uniform, count, shuffled))
        if not args.json:
            print(said[0].line, flush=True)

    plan = plan_class_share(
        sample, args.protocol, args.eps, args.shares, args.reps, args.seed, setup, people=args.people,
        progress=not args.json, dummies=shuffled.dummies if shuffled is not None else 0, first=first,
    )  # fmt: skip
    people = said[0]
    if args.json:
        uniform = plan.forecasts[0]
        print(
            json.dumps(
                {
                    "dataset": sample.name,
                    "protocol": args.protocol,
                    "eps": args.eps,
                    **(shuffled.fields() if shuffled is not None else {}),
                    "people": plan.people,
                    **people.fields,
                    "reps": args.reps,
                    "seed": args.seed,
                    "uniform_share": plan.uniform_share,
                    "chosen": plan.chosen,
                    "shares": [
                        {
                            "share": f.share,
                            "accuracy": float(f.accuracy.mean()),
                            "gain": None if f.share is None else f.gain(uniform)[0],
                            "gain_se": None if f.share is None else f.gain(uniform)[1],
                            "majority": float(f.majority.mean()),
                        }
                        for f in plan.forecasts
                    ],
                }
            )
        )
        return 0
    print(
        f"{sample.name}: {args.protocol}, eps={args.eps:g} per person (one report each), {plan.people} participants "
        f"a collection, {args.reps} simulated collections per share (seeds {args.seed}–{args.seed + args.reps - 1})"
    )
    if shuffled is not None:
        print(f"  {shuffled.describe()}")
    print("\n".join(describe(plan, "normsub")))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
