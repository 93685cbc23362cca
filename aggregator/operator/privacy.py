"""``python -m aggregator privacy``: what shuffling buys, from the shuffle accountant.

Given the local ε a report is drawn with, the number of people whose reports are shuffled
together and δ, the central ε against the aggregator alone (:mod:`protocols.shuffling`); or,
given a central ε to meet, the largest local ε whose shuffled reports meet it.
"""

from __future__ import annotations

import argparse
import json

from participant.spec import EPSILON_RANGE
from participant.usage import non_negative_int, number, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "privacy",
        help="the central epsilon of shuffled reports, or the local epsilon a central one allows",
        description="Privacy amplification by shuffling (Feldman, McMillan and Talwar's numerical bound): N people "
        "each send one report drawn at local epsilon E0, and the aggregator receives them shuffled, with M dummy "
        "reports the shuffler adds, and nothing that ties a report to its sender. --local-eps E0 prints the central "
        "(epsilon, delta) against the aggregator alone, twice: when the batch's others are people (N - 1 of them "
        "and the M dummies), and when the aggregator sent the shuffler every other report (a person's report among "
        "the dummies alone). --central-eps E prints the largest local epsilon whose shuffled reports stay within E "
        "(and within --flooded-eps against a flooding aggregator). Both assume the shuffler does not collude with "
        "the aggregator.",
        allow_abbrev=False,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--local-eps", type=number(*EPSILON_RANGE), metavar="E0", help="each report's epsilon (what a device spends)")
    which.add_argument("--central-eps", type=number(1e-6, EPSILON_RANGE[1]), metavar="E", help="the epsilon to meet against the aggregator")
    parser.add_argument("--people", type=positive_int, required=True, metavar="N", help="people's reports shuffled together (the smallest batch)")
    parser.add_argument("--dummies", type=non_negative_int, default=0, metavar="M", help="dummy reports the shuffler adds to every batch (default 0)")
    parser.add_argument(
        "--flooded-eps", type=number(1e-6, EPSILON_RANGE[1]), metavar="E",
        help="with --central-eps: also meet E against an aggregator that floods the batch",
    )  # fmt: skip
    parser.add_argument(
        "--delta", type=number(1e-300, 0.5), metavar="D",
        help="delta, below 1/N (default 1/(10 N): at 1/N one person's record could be published outright)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _people(n: int) -> str:
    return "1 person" if n == 1 else f"{n:,} people"


def run(args) -> str:
    """The answer to ``python -m aggregator privacy``, as text or JSON; raises ValueError for a
    delta of at least 1/N (one line, exit 2 on the command line)."""
    from protocols.shuffling import closed_form_epsilon, default_delta, guarantees, local_epsilon_for

    delta = args.delta if args.delta is not None else default_delta(args.people)
    if delta * args.people >= 1:
        raise ValueError(
            f"--delta {delta:g} must lie below 1/N = 1/{args.people}: an (epsilon, delta) release at that delta may "
            "publish one person's record outright"
        )
    if args.flooded_eps is not None and args.central_eps is None:
        raise ValueError("--flooded-eps goes with --central-eps")
    local = args.local_eps
    if local is None:
        local = local_epsilon_for(args.central_eps, args.people, args.dummies, delta, args.flooded_eps, EPSILON_RANGE[1])
    found = guarantees(local, args.people, args.dummies, delta)
    people, flooded = found["people"], found["flooded"]
    reports = args.people + args.dummies
    closed = closed_form_epsilon(local, reports, delta)
    amplified = people < local * (1 - 1e-4)
    answer = {
        "local_epsilon": local, "people": args.people, "dummies": args.dummies, "delta": delta,
        "central_epsilon": people, "flooded_epsilon": flooded, "amplified": amplified,
        "flooded_amplified": found["amplified"], "closed_form": closed,
    }  # fmt: skip
    if args.json:
        return json.dumps(answer)
    who = _people(args.people) + (f" and {args.dummies:,} dummies" if args.dummies else "")
    lines = [
        f"{who}, each report at local epsilon {local:.4g} (what a device spends, and its guarantee against the "
        "aggregator and the shuffler together),"
    ]
    if amplified:
        lines.append(
            f"shuffled together: ({people:.4g}, {delta:.3g})-DP against the aggregator alone when the other reports "
            "of a batch are people's (Feldman, McMillan and Talwar's numerical bound)"
        )
    else:
        few = "one report is not shuffled with any other" if reports == 1 else f"{reports:,} reports are too few at this epsilon"
        lines.append(f"shuffled together: no amplification ({few}): epsilon {local:.4g} against the aggregator alone")
    if not args.dummies:
        lines.append(
            "against an aggregator that sends the shuffler every other report of a batch: no amplification (no dummies): "
            f"epsilon {local:.4g}"
        )
    elif found["amplified"]:
        lines.append(
            f"against an aggregator that sends the shuffler every other report of a batch: ({flooded:.4g}, {delta:.3g})-DP "
            f"(a person's report among the {args.dummies:,} dummies alone)"
        )
    else:
        lines.append(
            f"against an aggregator that sends the shuffler every other report of a batch: no amplification "
            f"({args.dummies:,} dummies are too few at this epsilon): epsilon {local:.4g}"
        )
    closed_text = f"{closed:.4g}" if closed is not None else "does not apply at this local epsilon"
    lines.append(f"  the closed form (their Theorem 3.1) for {reports:,} report{'' if reports == 1 else 's'}: {closed_text}")
    if args.central_eps is not None:
        also = f" and within {args.flooded_eps:g} against a flooding aggregator" if args.flooded_eps is not None else ""
        lines.insert(0, f"the largest local epsilon whose shuffled reports stay within central epsilon {args.central_eps:g}{also}:")
    return "\n".join(lines)
