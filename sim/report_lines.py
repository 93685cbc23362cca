"""What a simulator run prints: the accuracy summary and its lines, the verdict against the constant
classifier (and the people a collection would need), each input's protocol and what each person spends."""

from __future__ import annotations

import sys

import numpy as np

from .cli_options import shuffled_for


def learned(results: list, estimator: str, data, args, setup=None, search: bool = True) -> dict:
    """Whether the model beat the constant classifier (``beats_constant``, with the mean gain and
    its standard error), and, when it did not and ``search``, the people a collection would need
    for it to (``people_needed``; None: more people were not shown to help), from simulated collections."""
    from .experiment import test_rows
    from .verdict import people_needed, verdict

    majority = [r.majority_accuracy for r in results]
    if not np.isfinite(majority).all():
        return {}
    found = verdict([r.accuracy[estimator] for r in results], majority, test_rows(results[0].n_train))
    out = {"beats_constant": found.learned, "gain_over_constant": found.gain, "gain_over_constant_se": found.se}
    if not found.learned and search:
        print("the model does not beat the constant classifier: estimating the people it would need…", file=sys.stderr)
        epsilon = args.eps
        if getattr(args, "central_eps", None) is not None:  # a larger collection may report at a larger local ε
            epsilon = shuffled_rule(args)
        out["people_needed"] = people_needed(data, args.protocol, epsilon, estimator, setup, args.seed)
    return out


def shuffled_rule(args):
    """How a shuffled collection of ``people`` reports, as the command line asked (a function of
    the people: the default dummies grow with them, and so may the local ε)."""
    return lambda people: shuffled_for(args.central_eps, people, args.delta, args.dummies, args.flooded_eps)  # noqa: E731


def verdict_line(summary: dict) -> str | None:
    """The one line of :func:`sim.verdict.describe` for a summary :func:`learned` filled."""
    from .verdict import Verdict, describe

    if "beats_constant" not in summary:
        return None
    found = Verdict(summary["gain_over_constant"], summary["gain_over_constant_se"])
    line = describe(found, summary.get("people_needed"), searched="people_needed" in summary)
    if line is not None and "through_shuffler" in summary:
        via = summary["through_shuffler"]
        line += (
            f"\n  through a shuffler, at the same epsilon {via['central_eps']:g} against the aggregator, the same "
            f"{summary['n_train']:,} people give {via['accuracy_mean']:.4f} ({via['gain_over_constant']:+.4f} ± "
            f"{via['gain_over_constant_se']:.4f} over the constant): {via['command']}"
        )
    return line


def accuracy_summary(results: list, estimator: str) -> dict:
    """Training-set size and the mean and standard deviation of the private and non-private
    accuracies over ``results`` (one RunResult per repetition)."""
    accuracy = np.array([r.accuracy[estimator] for r in results])
    nonprivate = np.array([r.nonprivate_accuracy for r in results])
    majority = np.array([r.majority_accuracy for r in results])
    summary = {
        "n_train": results[0].n_train,
        "accuracy_mean": float(accuracy.mean()),
        "accuracy_std": float(accuracy.std()),
        "nonprivate_mean": float(nonprivate.mean()),
        "nonprivate_std": float(nonprivate.std()),
    }
    if np.isfinite(majority).all():  # replays over HTTP score no constant classifier
        summary["majority_mean"] = float(majority.mean())
    if all(estimator in r.log_loss for r in results):  # --log-loss
        losses = np.array([r.log_loss[estimator] for r in results])
        summary.update(
            log_loss_mean=float(losses.mean()),
            log_loss_std=float(losses.std()),
            prior_log_loss_mean=float(np.mean([r.prior_log_loss for r in results])),
        )
    return summary


def accuracy_lines(summary: dict) -> str:
    """The text report's accuracy lines for an :func:`accuracy_summary`: private, non-private, and
    the best constant classifier on the test rows where the runs scored it."""
    lines = [
        f"  LDP Naive Bayes accuracy  {summary['accuracy_mean']:.4f} ± {summary['accuracy_std']:.4f}",
        f"  non-private Naive Bayes   {summary['nonprivate_mean']:.4f} ± {summary['nonprivate_std']:.4f}",
    ]
    if "majority_mean" in summary:
        lines.append(f"  best constant (test rows) {summary['majority_mean']:.4f}")
    if "log_loss_mean" in summary:
        mean, std = summary["log_loss_mean"], summary["log_loss_std"]
        lines.append(f"  LDP Naive Bayes log-loss  {mean:.4f} ± {std:.4f} nats per record")
        lines.append(f"  class shares (constant)   {summary['prior_log_loss_mean']:.4f}")
    return "\n".join(lines)



def protocol_line(spec) -> str:
    """Each input's mechanism, grouped: ``DE for class; OUE for buying, maint, …``."""
    groups: dict[str, list[str]] = {}
    for name, protocol in spec.protocols.items():
        groups.setdefault(protocol, []).append(name)
    return "; ".join(f"{protocol} for {', '.join(names)}" for protocol, names in groups.items())


def describe_budget(spec) -> str:
    """What each simulated person spends, in words."""
    if spec.budget == "one-report":
        return f"eps={spec.epsilon:g} per person (one report each)"
    return (
        f"budget {spec.budget}: {spec.reports_per_person} reports at eps={spec.epsilon_per_input:g}, "
        f"so eps={spec.epsilon_per_person:g} per person"
    )

