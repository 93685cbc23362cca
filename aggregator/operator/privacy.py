"""``python -m aggregator privacy``: what shuffling buys, from the shuffle accountant.

Given the local ε a report is drawn with, the number of people whose reports are shuffled
together and δ, the central ε against the aggregator alone (:mod:`protocols.shuffling`); or,
given a central ε to meet, the largest local ε whose shuffled reports meet it.
"""

from __future__ import annotations

import argparse
import json

from participant.spec import EPSILON_RANGE
from participant.usage import number, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "privacy",
        help="the central epsilon of shuffled reports, or the local epsilon a central one allows",
        description="Privacy amplification by shuffling (Feldman, McMillan and Talwar's numerical bound): N people "
        "each send one report drawn at local epsilon E0, and the aggregator receives them shuffled, with nothing "
        "that ties a report to its sender. --local-eps E0 prints the central (epsilon, delta) against the "
        "aggregator alone; --central-eps E prints the largest local epsilon whose shuffled reports stay within E. "
        "It assumes the shuffler does not collude with the aggregator and that the other reports of a batch come "
        "from people.",
        allow_abbrev=False,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--local-eps", type=number(*EPSILON_RANGE), metavar="E0", help="each report's epsilon (what a device spends)")
    which.add_argument("--central-eps", type=number(1e-6, EPSILON_RANGE[1]), metavar="E", help="the epsilon to meet against the aggregator")
    parser.add_argument("--people", type=positive_int, required=True, metavar="N", help="reports shuffled together (the smallest batch)")
    parser.add_argument(
        "--delta", type=number(1e-300, 0.5), metavar="D", help="delta (default 1/(10 N), below the 1/N at which one record could be published)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> str:
    """The answer to ``python -m aggregator privacy``, as text or JSON."""
    from protocols.shuffling import closed_form_epsilon, default_delta, largest_local_epsilon, shuffled_epsilon

    delta = args.delta if args.delta is not None else default_delta(args.people)
    if args.local_eps is not None:
        local = args.local_eps
        central = shuffled_epsilon(local, args.people, delta)
    else:
        central = args.central_eps
        local = largest_local_epsilon(central, args.people, delta)
        central = shuffled_epsilon(local, args.people, delta)
    closed = closed_form_epsilon(local, args.people, delta)
    answer = {"local_epsilon": local, "people": args.people, "delta": delta, "central_epsilon": central, "closed_form": closed}
    if args.json:
        return json.dumps(answer)
    closed_text = f"{closed:.4g}" if closed is not None else "does not apply at this local epsilon"
    lines = [
        f"{args.people} people, each reporting at local epsilon {local:.4g} (what a device spends, and its guarantee "
        "against the aggregator and the shuffler together),",
        f"shuffled together: ({central:.4g}, {delta:.3g})-DP against the aggregator alone "
        "(Feldman, McMillan and Talwar's numerical bound)",
        f"  the closed form (their Theorem 3.1): {closed_text}",
    ]
    if args.central_eps is not None:
        lines.insert(0, f"the largest local epsilon whose shuffled reports stay within central epsilon {args.central_eps:g}:")
    return "\n".join(lines)
