"""What the same people would give through a shuffler, named after a run that learned nothing.

A run whose model does not beat the constant classifier (one report per person, in process) is
followed by the same collection shuffled at the same ε against the aggregator, in fast mode; when
that one beats the constant, the run names its accuracy and the command that gives exactly it.
"""

from __future__ import annotations

import shlex

import numpy as np

from .cli_options import shuffled_for, training_people


def shuffled_command(argv: list[str], epsilon: float) -> str:
    """The ``python -m sim`` command of the run ``argv`` through a shuffler at ``epsilon`` against
    the aggregator: ``--eps`` becomes ``--central-eps`` (added when ``argv`` left ε at its
    default), ``--protocol`` goes (a shuffled spec chooses each input's), and it runs in fast
    mode, as the figure quoted beside it was drawn."""
    command, skip, central = [], False, False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--protocol", "--mode"):
            skip = True
        elif a.startswith(("--protocol=", "--mode=")):
            continue
        elif a == "--eps" or a.startswith("--eps="):
            central = True
            command.append("--central-eps" if a == "--eps" else a.replace("--eps=", "--central-eps=", 1))
        else:
            command.append(a)
    if not central:
        command += ["--central-eps", f"{epsilon:g}"]
    return "python -m sim " + shlex.join([*command, "--mode", "fast"])


def through_shuffler(data, args, setup, argv: list[str]) -> dict:
    """What the same people would give reporting through a shuffler at the same ε against the
    aggregator (``--central-eps`` with the default dummies, each input's protocol chosen for the
    local ε), when that beats the constant classifier: ``{"through_shuffler": {...}}`` with the
    accuracy, its gain and the command that gives that very accuracy (:func:`shuffled_command`),
    else nothing. Its collections run in fast mode, so this costs a fraction of the replay it
    follows."""
    from .experiment import run_once, test_rows
    from .verdict import verdict

    shuffled = shuffled_for(args.eps, training_people(data))
    if shuffled.local <= args.eps:  # too few people for a shuffler to amplify anything
        return {}
    results = [
        run_once(data, "auto", shuffled.local, args.seed + r, (args.estimator,), args.theta, setup,
                 args.budget, "fast", args.class_share, False, shuffled.dummies)  # fmt: skip
        for r in range(args.reps)
    ]
    accuracy = np.array([r.accuracy[args.estimator] for r in results])
    found = verdict(accuracy, [r.majority_accuracy for r in results], test_rows(results[0].n_train))
    if not found.learned:
        return {}
    return {
        "through_shuffler": {
            "central_eps": args.eps,
            "local_eps": shuffled.local,
            "dummies": shuffled.dummies,
            "accuracy_mean": float(accuracy.mean()),
            "accuracy_std": float(accuracy.std()),
            "gain_over_constant": found.gain,
            "gain_over_constant_se": found.se,
            "command": shuffled_command(argv, args.eps),
        }
    }
