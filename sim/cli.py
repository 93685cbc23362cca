"""``python -m sim``: simulate an LDP Naive Bayes collection on a data set and report accuracy."""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from aggregator.estimation.estimators import ESTIMATORS
from participant.errors import ClientError, SpecError
from participant.spec import EPSILON_RANGE
from participant.usage import Parser, folded, non_negative_int, number, positive_int, secret_line, share
from protocols import DEFAULT_THETA, PROTOCOL_NAMES

from .cli_options import (
    add_central_options,
    add_csv_options,
    check_common,
    csv_source,
    load_data,
    shuffled_for,
    training_people,
)
from .datasets import ENV_VAR, dataset_names
from .report_lines import accuracy_lines, accuracy_summary, describe_budget, learned, protocol_line, verdict_line
from .shuffler_hint import through_shuffler
from .spec_runs import cannot_use, run_collection, run_http, run_spec

# The simulator's machinery (scikit-learn, aiohttp, tqdm) is imported where a command runs, not
# here: `--help` and a refused option answer without loading it (tests/test_startup.py).

DESCRIPTION = """\
Simulate a local-DP Naive Bayes collection: every training row of a data set becomes one
participant who sends exactly one randomised report (one of its n+1 inputs, chosen at random),
so each simulated person spends exactly --eps. The aggregator estimates class and joint
frequencies, assembles the model, and its accuracy on the held-out 20% is printed beside
non-private Naive Bayes trained on the same split."""

EPILOG = f"""\
subcommands:
  python -m sim sweep --help     accuracy over a grid of protocols and ε, as CSV and plots
  python -m sim compare --help   LDP Naive Bayes beside central-DP baselines
  python -m sim plan --help      before collecting: which share of the people should report the class

examples:
  python -m sim --dataset car --protocol OUE --eps 1
  python -m sim --dataset mushroom --protocol DE --eps 1 --reps 20 --estimator paper --json
  python -m sim --csv survey.csv --label outcome --protocol SUE --eps 2

data: the paper's six data sets ship inside the package (they work offline); other files are
read from --data-dir, ${ENV_VAR}, ../shared/datasets, or downloaded from UCI."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m sim",
        allow_abbrev=False,  # "--admin-token" must not pass for "--admin-token-file"
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=dataset_names(), help="a UCI data set of the paper")
    source.add_argument(
        "--csv", type=csv_source, metavar="FILE[:LABEL]", help="your own data: a CSV file (see the data options)"
    )
    parser.add_argument(
        "--spec",
        metavar="FILE",
        help="run the collection this spec describes (the JSON a service accepts; it fixes the protocol, "
        "epsilon, budget and model); the built-in data sets' specs are in sim/specs/",
    )
    parser.add_argument("--data-dir", metavar="DIR", help=f"folder holding data files the package does not ship (or set ${ENV_VAR})")
    add_csv_options(parser)
    add_central_options(parser)
    parser.add_argument(
        "--protocol",
        type=folded(PROTOCOL_NAMES),
        choices=list(PROTOCOL_NAMES),
        default="auto",
        help="frequency oracle; auto (default): per input DE or OUE, whichever has the smaller variance",
    )
    parser.add_argument(
        "--eps", type=number(*EPSILON_RANGE), default=1.0, help="epsilon each person spends on their one report (default 1)"
    )
    parser.add_argument(
        "--theta",
        type=share,
        default=DEFAULT_THETA,
        help="THE threshold (default: the variance-optimal one for the epsilon; the paper's experiments use 0.25)",
    )
    parser.add_argument(
        "--estimator",
        choices=list(ESTIMATORS),
        default="normsub",
        help="how counts become probabilities: normsub (default), paper (section 3.1 as written), ibu "
        "(normsub with EM histograms for DE inputs) or auto (of those three, the one whose model fitted on half "
        "of each collection's reports scores best on the other half; the verdict and people-needed judge its pick)",
    )
    parser.add_argument(
        "--reps", type=positive_int, default=10, help="repetitions, each a fresh random 80/20 split (default 10)"
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the first repetition; repetition r uses seed+r (default 0)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--log-loss",
        action="store_true",
        help="also score the test log-loss (nats per record, at the model's own temperature) beside the "
        "class shares' (knowing nothing): a discrete model then runs its temperature's bootstrap",
    )
    parser.add_argument(
        "--budget",
        choices=["one-report", "per-input", "split"],
        default="one-report",
        help="one-report: each person reports one input at --eps (default; spends --eps); per-input: every "
        "input at --eps (spends (n+1)·eps, what the paper's figures appear to measure); split: every input "
        "at eps/(n+1) (spends --eps)",
    )
    parser.add_argument(
        "--class-share",
        type=share,
        metavar="SHARE",
        help="share of people who report the class input (default: uniform over the inputs, 1/(n+1)); "
        "more reports on the class estimate an uneven class prior better, at the features' expense "
        "(what an operator does with an assigned collection; research/class_share.py measures it)",
    )
    parser.add_argument(
        "--mode",
        choices=["replay", "fast"],
        default="replay",
        help="replay: every participant's report is drawn (default); fast: each aggregate is drawn from "
        "its exact distribution",
    )
    cont = parser.add_argument_group("continuous data sets (australian, diabetes)")
    cont.add_argument(
        "--model",
        choices=["discrete", "gaussian"],
        default="discrete",
        help="discrete (default, and recommended: best on 26 of 32 data set and epsilon cells of "
        "research/results/continuous_models.md, every one at epsilon >= 2): equal-width bins, then the categorical "
        "pipeline; gaussian: LDP Gaussian NB",
    )
    cont.add_argument("--bins", type=number(2, whole=True), help="bins per coordinate (default: the paper's, 2 australian, 4 diabetes)")
    cont.add_argument(
        "--reduce", choices=["pca", "dca"], help="project before perturbing (fitted on the training split)"
    )
    cont.add_argument("--components", type=positive_int, default=1, help="coordinates kept by --reduce (default 1)")
    cont.add_argument(
        "--approach",
        type=int,
        choices=[1, 2, 3],
        default=3,
        help="gaussian model: 1 all coordinates with noise scaled by their number, 2 one-bit mechanism, "
        "3 one input per person (default; on Diabetes 1 and 2 score below the constant classifier)",
    )
    http = parser.add_argument_group("over HTTP (--via http)")
    http.add_argument(
        "--via",
        choices=["process", "http"],
        default="process",
        help="process: the aggregator core in this process (default); http: every training row is a "
        "participant client posting its report to an aggregator service",
    )
    http.add_argument("--aggregator", metavar="URL", help="an aggregator to use; omitted, a local one is started")
    http.add_argument(
        "--admin-token-file",
        metavar="FILE",
        help="file holding the --aggregator's admin token, to create the collection (else $LDPNB_ADMIN_TOKEN; "
        "never on the command line, where ps shows it)",
    )
    http.add_argument(
        "--clients",
        type=positive_int,
        default=256,
        help="participants in flight at once, each on its own connection from this machine: an --aggregator "
        "of your own must allow that many per address (serve --max-connections-per-address; default 256)",
    )
    http.add_argument(
        "--collection",
        metavar="ID",
        help="replay into this existing collection of --aggregator (its published spec decides protocol, "
        "epsilon and model; one repetition; no admin token needed) instead of a fresh one",
    )
    parser.add_argument(
        "--skip-unknown",
        action="store_true",
        help="with --spec or --collection: skip (and count) the rows holding a class or value the spec does not "
        "declare, instead of refusing the file",
    )
    http.add_argument(
        "--all-rows",
        action="store_true",
        help="with --collection: send every row, not the 80 %% training split (the model is then scored on the "
        "rows it learned from, which flatters it)",
    )
    http.add_argument(
        "--tokens",
        metavar="FILE",
        help="enrollment tokens for a --collection that requires them, one per line "
        "(python -m aggregator enroll ID --count N --out FILE)",
    )
    return parser


# What a spec (--spec, or the --collection's published one) fixes: giving these beside it is refused.
SPEC_FIXES = (
    *("--protocol", "--eps", "--theta", "--budget", "--model", "--bins", "--reduce", "--components", "--approach"),
    "--class-share",
)


def given(argv: list[str], option: str) -> bool:
    """Whether ``option`` was on the command line (as ``--opt value`` or ``--opt=value``)."""
    return any(a == option or a.startswith(option + "=") for a in argv)


SUBCOMMANDS = ("sweep", "compare", "plan")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sweep"]:
        from .sweep import main as sweep

        return sweep(argv[1:])
    if argv[:1] == ["compare"]:
        from .compare import main as compare

        return compare(argv[1:])
    if argv[:1] == ["plan"]:
        from .plan import main as plan

        return plan(argv[1:])
    parser = build_parser()
    if argv[:1] and not argv[0].startswith("-"):  # the main command takes no word: a subcommand, mistyped
        import difflib

        close = difflib.get_close_matches(argv[0], SUBCOMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f" (the subcommands: {', '.join(SUBCOMMANDS)})"
        parser.error(f"unknown command {argv[0]!r}{hint}")
    args = parser.parse_args(argv)
    check_common(parser, args)
    args.admin_token = os.environ.get("LDPNB_ADMIN_TOKEN")
    if args.admin_token_file:
        try:
            args.admin_token = secret_line(args.admin_token_file, "--admin-token-file")
        except ValueError as exc:
            parser.error(str(exc))
    fixed = [option for option in SPEC_FIXES if given(argv, option)]
    if args.spec and fixed:
        parser.error(f"--spec fixes {fixed[0].lstrip('-')}: leave out {', '.join(fixed)}")
    if args.spec and args.via == "http":
        parser.error("--spec runs in this process; to replay into a service, create the collection from the spec "
                     "(python -m aggregator create --spec FILE) and pass --via http --collection ID")  # fmt: skip
    if args.collection:
        if args.via != "http" or not args.aggregator:
            parser.error("--collection replays into a running service: add --via http --aggregator URL")
        if fixed:
            parser.error(f"the collection's published spec fixes {fixed[0].lstrip('-')}: leave out {', '.join(fixed)}")
        if given(argv, "--reps") and args.reps != 1:
            parser.error("--collection takes one repetition: every person reports once into a real collection")
        args.reps = 1
    elif args.tokens:
        parser.error("--tokens goes with --collection (a fresh collection takes no enrollment tokens)")
    elif args.all_rows:
        parser.error("--all-rows goes with --collection (a simulation keeps a test split to score on)")
    if args.skip_unknown and not (args.spec or args.collection):
        parser.error("--skip-unknown goes with --spec or --collection (without one, the data declare the domain)")
    if args.aggregator and not args.admin_token and not args.collection:
        parser.error("--aggregator needs the admin token in $LDPNB_ADMIN_TOKEN or --admin-token-file")
    if args.via == "http" and (args.budget != "one-report" or args.mode != "replay"):
        parser.error("--via http replays one report per person: it takes neither --budget nor --mode fast")
    if args.class_share is not None and (args.via == "http" or args.budget != "one-report" or args.collection):
        parser.error(
            "--class-share goes with one report per person simulated in process "
            "(not with --via http, --collection or --budget; a --spec states its own class_share)"
        )
    if args.estimator == "auto" and args.model == "gaussian":
        parser.error("--estimator auto chooses among the discrete model's estimators: not with --model gaussian")
    if args.central_eps is not None:
        if given(argv, "--eps"):
            parser.error("--eps and --central-eps: give one (with --central-eps each person's epsilon follows)")
        if args.spec or args.collection or args.via == "http" or args.budget != "one-report":
            parser.error("--central-eps simulates shuffled reports in this process: not with --spec, --collection, "
                         "--via http (a shuffled collection follows its spec) or --budget")  # fmt: skip
    elif args.delta is not None or args.flooded_eps is not None or args.dummies is not None:
        parser.error("--delta, --flooded-eps and --dummies go with --central-eps")
    if args.spec:
        return run_spec(parser, args)
    if args.collection:
        return run_collection(parser, args)
    import aiohttp
    from tqdm import tqdm

    from .experiment import PAPER_BINS, Setup, run_once, spec_for, split

    data = load_data(parser, args)
    setup = Setup(args.model, args.bins, args.reduce, args.components if args.reduce else None, args.approach)
    if not data.continuous and (args.model != "discrete" or args.reduce or args.bins):
        parser.error(
            f"{data.name} is categorical: --model gaussian, --bins and --reduce apply to continuous data "
            "(australian, diabetes, or a CSV with numeric columns)"
        )
    if len(data.y) < 250:
        print(
            f"warning: {len(data.y)} rows leave about {int(len(data.y) * 0.8)} participants; with local DP "
            "so few reports make the accuracy mostly noise",
            file=sys.stderr,
        )
    if args.reduce and not 1 <= args.components <= data.X.shape[1]:
        parser.error(f"--components must lie in [1, {data.X.shape[1]}]")
    if args.reduce:
        print(
            f"note: the {args.reduce.upper()} projection is fitted on the training split, i.e. on the surveyed "
            "people, to reproduce the paper; a real collection fits it on a separate reference sample.",
            file=sys.stderr,
        )

    shuffled = None
    if args.central_eps is not None:
        shuffled = shuffled_for(args.central_eps, training_people(data), args.delta, args.dummies, args.flooded_eps)
        args.eps = shuffled.local
    try:
        X_first, _, y_first, y_test = split(data, args.seed)
        spec = spec_for(data, args.protocol, args.eps, args.theta, setup, X_first, y_first, args.budget)
    except (SpecError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    absent = sorted(set(data.y) - set(y_test))
    if absent:
        print(f"warning: the test split of seed {args.seed} holds no row of class(es) {absent}", file=sys.stderr)
    if args.via == "http":
        from .http_replay import ReplayError

        try:
            results = run_http(args, data, setup)
        except ReplayError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
        except (OSError, aiohttp.ClientError, ClientError) as exc:
            parser.exit(2, f"{parser.prog}: error: {cannot_use(exc)}\n")
    else:
        results = [
            run_once(
                data,
                args.protocol,
                args.eps,
                args.seed + r,
                (args.estimator,),
                args.theta,
                setup,
                args.budget,
                args.mode,
                args.class_share,
                args.log_loss,
                shuffled.dummies if shuffled is not None else 0,
            )
            for r in tqdm(range(args.reps), desc=f"{data.name} {args.protocol} eps={args.eps:g}", delay=1.0, unit="rep")
        ]
    summary = {
        "dataset": data.name,
        "protocol": args.protocol,
        "eps": args.eps,
        "budget": args.budget,
        "eps_per_person": spec.epsilon_per_person,
        "reports_per_person": spec.reports_per_person,
        "reps": args.reps,
        "seed": args.seed,
        "estimator": args.estimator,
        **accuracy_summary(results, args.estimator),
    }
    if args.class_share is not None:
        summary["class_share"] = args.class_share
    if shuffled is not None:
        summary.update(shuffled.fields())
    summary["protocols"] = spec.protocols
    if args.protocol == "THE":
        summary["theta"] = spec.theta  # as resolved: the variance-optimal one unless given
    if data.continuous:
        summary.update(model=args.model, reduce=args.reduce, components=setup.components)
        if args.model == "discrete":
            summary["bins"] = args.bins or PAPER_BINS.get(data.name, 4)
        else:
            summary["approach"] = args.approach
    summary["via"] = args.via
    if args.via == "http":
        summary["reports_per_second"] = float(np.mean([r.reports_per_second for r in results]))
    summary.update(learned(results, args.estimator, data, args, setup))
    if summary.get("beats_constant") is False and shuffled is None and args.via != "http" and args.budget == "one-report":
        summary.update(through_shuffler(data, args, setup, argv))
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{data.name}: {args.protocol}, {describe_budget(spec)}, {summary['n_train']} participants, "
            f"estimator {args.estimator}, {args.reps} reps ({args.mode})\n"
            + (f"  {setup.describe()}\n" if data.continuous else "")
            + (f"  protocols: {protocol_line(spec)}\n" if args.protocol == "auto" else "")
            + (f"  {shuffled.describe()}\n" if shuffled is not None else "")
            + accuracy_lines(summary)
        )
        if args.via == "http":
            print(
                f"  ingest over HTTP          {summary['reports_per_second']:,.0f} reports/s ({args.clients} clients in flight)"
            )
        if line := verdict_line(summary):
            print(line)
    return 0

