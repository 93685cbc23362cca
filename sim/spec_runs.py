"""Running a declared collection: a --spec's repetitions in this process, the data replayed into a
running service's --collection, and the main command's repetitions over HTTP; the CSV read as a spec
declares it, and one line for an error talking to a party."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import numpy as np

from participant.errors import ClientError, RecordError, SpecError, SubmissionFailed
from participant.spec import CollectionSpec

from .cli_options import load_data
from .report_lines import accuracy_lines, accuracy_summary, describe_budget, learned, verdict_line


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
