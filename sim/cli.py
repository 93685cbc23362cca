"""``python -m sim``: simulate an LDP Naive Bayes collection on a data set and report accuracy."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import numpy as np

from aggregator.estimation.estimators import ESTIMATORS
from participant.errors import ClientError, RecordError, SpecError, SubmissionFailed
from participant.spec import EPSILON_RANGE, CollectionSpec
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
from .shuffler_hint import through_shuffler

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


def cannot_use(exc: Exception) -> str:
    """One line for an error talking to a party: a :class:`SubmissionFailed` names the party
    (the shuffler or the aggregator) and the option that lifts its limit itself."""
    if isinstance(exc, SubmissionFailed) and exc.party:
        return str(exc)
    return f"cannot use the aggregator: {type(exc).__name__}: {exc}"


def read_as_declared(parser, args, spec: CollectionSpec, source: str) -> None:
    """Read a --csv as ``spec`` declares it (``source``: where the spec came from, for messages):
    its class column, and its numeric columns with their declared ranges, or, for a categorical
    spec, every feature categorical (however many distinct numbers a column holds). An option
    that would read the file otherwise is refused, naming both."""
    if args.label and args.label != spec.label:
        parser.error(f"--label {args.label} conflicts with {source}, whose class column is {spec.label!r}: leave out --label")
    for option, value in (("--numeric", args.numeric), ("--categorical", args.categorical), ("--range", args.range),
                          ("--ranges", args.ranges)):  # fmt: skip
        if value:
            parser.error(f"{option} conflicts with {source}, which declares every column's kind and range: leave out {option}")
    args.label = spec.label
    if spec.continuous is not None:
        args.numeric = tuple(f.name for f in spec.continuous.inputs)
        args.range = [f"{f.name}={f.low}:{f.high}" for f in spec.continuous.inputs]
        args.ranges = []
    else:
        args.categorical = tuple(f.name for f in spec.features)


def declared_rows(parser, args, data, spec: CollectionSpec):
    """``data`` less the rows holding a class or category ``spec`` does not declare, with a note
    of how many went, if --skip-unknown; else ``data`` as it is (an unknown value is then refused
    when the collection meets it)."""
    if not args.skip_unknown:
        return data
    known = np.isin(data.y.astype(str), spec.classes)
    first = None if known.all() else ("the class", str(data.y[np.flatnonzero(~known)[0]]))
    if spec.continuous is None:
        columns = {name: j for j, name in enumerate(data.feature_names)}
        for feature in spec.features:
            if feature.name in columns:
                values = data.X[:, columns[feature.name]].astype(str)
                ok = np.isin(values, feature.categories)
                if first is None and not ok.all():
                    first = (f"column {feature.name!r}", str(values[np.flatnonzero(~ok)[0]]))
                known &= ok
    skipped = int((~known).sum())
    if skipped:
        where, value = first
        print(f"skipped {skipped:,} of {len(known):,} rows holding a value the spec does not declare (first: {where}, "
              f"{value!r})", file=sys.stderr)  # fmt: skip
    if skipped == len(known):
        parser.exit(2, f"{parser.prog}: error: no row of {data.name} holds only values the spec declares\n")
    return data.rows(np.flatnonzero(known)) if skipped else data


def run_spec(parser: argparse.ArgumentParser, args) -> int:
    """``--spec FILE --csv DATA``: the repetitions of the given collection on the CSV's rows."""
    from .experiment import run_with_spec

    try:
        with open(args.spec) as f:
            spec = CollectionSpec.from_json(f.read())
    except (OSError, SpecError) as exc:
        parser.exit(2, f"{parser.prog}: error: --spec {args.spec}: {exc}\n")
    read_as_declared(parser, args, spec, f"--spec {args.spec}")
    data = declared_rows(parser, args, load_data(parser, args), spec)
    print(spec.privacy_statement(), file=sys.stderr)
    try:
        results = [
            run_with_spec(spec, data, args.seed + r, (args.estimator,), args.mode, args.log_loss)
            for r in range(args.reps)
        ]
    except (RecordError, ValueError) as exc:
        parser.exit(2, f"{parser.prog}: error: the data do not fit the spec: {exc} (--skip-unknown skips such rows)\n")
    summary = {
        "dataset": data.name,
        "spec": args.spec,
        "protocol": spec.protocol,
        "protocols": spec.protocols,
        "eps_per_person": spec.epsilon_per_person,
        "reps": args.reps,
        **accuracy_summary(results, args.estimator),
        **learned(results, args.estimator, data, args, search=False),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{data.name} with the collection of {args.spec}: {describe_budget(spec)}, {summary['n_train']} "
            f"participants, {args.reps} reps\n" + accuracy_lines(summary)
        )
        if line := verdict_line(summary):
            print(line)
    return 0


def run_collection(parser: argparse.ArgumentParser, args) -> int:
    """``--via http --aggregator URL --collection ID``: the data set's training split replayed into
    an existing collection, then its model (once released) scored on the test split."""
    import aiohttp

    from aggregator.service.shuffling import stated_privacy

    from .http_replay import ReplayError, published, replay_into

    url = args.aggregator.rstrip("/")
    try:
        spec, enrollment, uid = asyncio.run(published(url, args.collection))
    except ReplayError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except (OSError, aiohttp.ClientError, ClientError) as exc:
        parser.exit(2, f"{parser.prog}: error: {cannot_use(exc)}\n")
    print(stated_privacy(spec), file=sys.stderr)
    read_as_declared(parser, args, spec, f"collection {args.collection}'s published spec")
    tokens = None
    if args.tokens:
        try:
            with open(args.tokens) as f:
                tokens = [line.strip() for line in f if line.strip()]
        except OSError as exc:
            parser.error(f"cannot read --tokens: {exc}")
    data = declared_rows(parser, args, load_data(parser, args), spec)
    try:
        sending = "every row" if args.all_rows else f"the training split of seed {args.seed} (80 %; --all-rows sends every row)"
        print(f"sending {sending} into {args.collection}, one participant per row", file=sys.stderr)
        run, note = replay_into(
            data, url, args.collection, spec, enrollment, args.seed, args.estimator, args.clients, tokens,
            args.log_loss, args.all_rows, uid,
        )  # fmt: skip
    except ReplayError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except (OSError, aiohttp.ClientError, ClientError) as exc:
        parser.exit(2, f"{parser.prog}: error: {cannot_use(exc)}\n")
    summary = {
        "dataset": data.name,
        "collection": args.collection,
        "aggregator": url,
        "estimator": args.estimator,
        "sent": run.n_train,
        "reports_per_second": run.reports_per_second,
        "all_rows": args.all_rows,
        "accuracy": None if np.isnan(run.accuracy[args.estimator]) else run.accuracy[args.estimator],
        "nonprivate": run.nonprivate_accuracy,
        "majority": run.majority_accuracy,
    }
    if not note:
        summary.update(learned([run], args.estimator, data, args, search=False))
    if run.log_loss:
        summary.update(log_loss=run.log_loss[args.estimator], prior_log_loss=run.prior_log_loss)
    if note:
        summary["note"] = note
    if args.json:
        print(json.dumps(summary))
    else:
        scored_on = "every row it learned from" if args.all_rows else "the test split"
        print(f"{data.name}: {run.n_train} reports sent into {args.collection} at {url} "
              f"({run.reports_per_second:,.0f} reports/s), scored on {scored_on}")  # fmt: skip
        if note:
            print(f"  no model yet: {note}")
        else:
            print(f"  LDP Naive Bayes accuracy  {run.accuracy[args.estimator]:.4f} (estimator {args.estimator})")
        print(f"  non-private Naive Bayes   {run.nonprivate_accuracy:.4f}")
        rows = "(every row)" if args.all_rows else "(test rows)"
        print(f"  best constant {rows:<11} {run.majority_accuracy:.4f}")
        if line := verdict_line(summary):
            print(line)
        if run.log_loss:
            print(f"  LDP Naive Bayes log-loss  {run.log_loss[args.estimator]:.4f} nats per record")
            print(f"  class shares (constant)   {run.prior_log_loss:.4f}")
    return 0


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


def run_http(args, data, setup) -> list:
    """The repetitions over HTTP, against ``--aggregator`` or a local aggregator started for them."""
    from .http_replay import LocalAggregator, run_over_http

    def reps(url: str, token: str) -> list:
        return [
            run_over_http(
                data,
                args.protocol,
                args.eps,
                args.seed + r,
                args.estimator,
                args.theta,
                url,
                token,
                args.clients,
                setup,
                args.log_loss,
            )
            for r in range(args.reps)
        ]

    if args.aggregator:
        return reps(args.aggregator.rstrip("/"), args.admin_token)
    with LocalAggregator(args.clients) as local:
        print(f"started a local aggregator at {local.url}", file=sys.stderr)
        return reps(local.url, local.admin_token)
