"""The operator's subcommands of ``python -m aggregator``: thin clients of a running service's
HTTP API (create, list, status, model, enroll, keys, and close, which asks a shuffled
collection's shuffler). Each takes ``--url`` (default ``$LDPNB_URL``,
else http://127.0.0.1:8080) and reads the admin token from ``$LDPNB_ADMIN_TOKEN`` or
``--admin-token-file``, never from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from participant.usage import non_negative_int, number, positive_int, positive_number, secret_line

from ..estimation.estimators import ESTIMATORS, model_from_dict
from ..estimation.plausibility import Z_THRESHOLD

DEFAULT_URL = "http://127.0.0.1:8080"
ENROLL_CHUNK = 10_000


class OperatorError(Exception):
    """Something the operator must fix (the message says what); printed as one line, exit 2."""


def add_parsers(sub: argparse._SubParsersAction, token_reader) -> None:
    """Add the operator's subcommands to ``sub``; ``token_reader(args)`` reads the admin token."""

    def common(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument(
            "--url",
            default=os.environ.get("LDPNB_URL", DEFAULT_URL),
            help=f"the service (default $LDPNB_URL, else {DEFAULT_URL})",
        )
        parser.add_argument("--admin-token-file", help="file holding the admin token (else $LDPNB_ADMIN_TOKEN)")
        parser.set_defaults(token_reader=token_reader)
        return parser

    create = common(sub.add_parser("create", help="create a collection from a spec file", allow_abbrev=False))
    create.add_argument("--spec", required=True, help="the collection spec, a JSON file")
    create.add_argument("--id", help="the collection's id (default: generated)")
    create.add_argument("--min-reports", type=non_negative_int, default=100, help="reports before estimates are released (default 100)")
    create.add_argument(
        "--enrollment", action="store_true",
        help="accept only reports of enrolled people: each carries its enrollment token or, with --shuffler, an "
        "anonymous token its one-time code obtained (checked by the shuffler; nobody can tell whose)",
    )  # fmt: skip
    shuffled = create.add_argument_group("a collection reported to through a shuffler (--shuffler)")
    shuffled.add_argument(
        "--shuffler", metavar="URL",
        help="the shuffler devices send their sealed reports to (python -m shuffler serve, run by another party); "
        "the service then takes this collection's reports only from it, in batches",
    )  # fmt: skip
    shuffled.add_argument(
        "--shuffler-token-file", metavar="FILE",
        help="file holding the token the shuffler presents (the one its --token-file holds; readable by its owner only)",
    )  # fmt: skip
    shuffled.add_argument(
        "--min-batch", type=number(2, whole=True), metavar="K",
        help="the fewest reports the shuffler releases at once (default: the spec's shuffle.min_batch)",
    )  # fmt: skip
    shuffled.add_argument(
        "--delta", type=number(1e-300, 0.5), metavar="D",
        help="the delta stated, below 1/K (default: the spec's, else 1/(10 K))",
    )  # fmt: skip
    shuffled.add_argument(
        "--dummies", type=non_negative_int, metavar="M",
        help="dummy reports the shuffler adds to every batch, so that a person's report hides among them even if "
        "the aggregator sent every other report of the batch (default: the spec's, else as many as the floor K; "
        "research/results/dummies.md says what they cost)",
    )  # fmt: skip

    keys = common(sub.add_parser("keys", help="the sealing key shuffled collections name; --rotate makes a new one", allow_abbrev=False))
    keys.add_argument(
        "--rotate", action="store_true",
        help="make a new current key (collections created from now on name it; earlier ones keep theirs)",
    )  # fmt: skip

    common(sub.add_parser("list", help="every collection with its progress", allow_abbrev=False))

    close = common(sub.add_parser(
        "close", help="release what waits at a shuffled collection's shuffler now, and take no more reports",
        description="Ask a shuffled collection's shuffler to release every report waiting there now, in batches of "
        "at least the floor, and to take no more (its devices then hear 410). With --pad, a last batch short of the "
        "floor is released with dummy reports in place of the people it lacks (the shuffle bound counts them as any "
        "report); without it, fewer than a batch left keep waiting, closed, until a close with --pad. A close always "
        "closes: refused while too few wait, it would tell the aggregator when the first person arrived.",
        allow_abbrev=False,
    ))  # fmt: skip
    close.add_argument("id", help="the collection")
    close.add_argument(
        "--shuffler-token-file", required=True, metavar="FILE",
        help="file holding the token the shuffler presents (the one the collection was created with)",
    )  # fmt: skip
    close.add_argument("--pad", action="store_true", help="release fewer than a batch, padded to the floor with dummies")

    status = common(sub.add_parser("status", help="a collection's progress, ingest rate and flags", allow_abbrev=False))
    status.add_argument("id", help="the collection's id (as `list` shows it)")
    status.add_argument("--interval", type=positive_number, default=2.0, help="seconds between the two counts the rate is from")
    status.add_argument("--wait", action="store_true", help="wait (with a progress bar) until the collection is released")

    model = common(sub.add_parser("model", help="save the trained model for scikit-learn (joblib)", allow_abbrev=False))
    model.add_argument("id", help="the collection's id (as `list` shows it)")
    model.add_argument("--out", required=True, help="the joblib file to write; a JSON model card is written beside it")
    model.add_argument(
        "--estimator",
        choices=list(ESTIMATORS),
        default="normsub",
        help="how the service turns counts into probabilities: normsub (default), paper (section 3.1 as "
        "written), ibu (exact histograms for DE inputs) or auto (the one of those three the reports' two halves choose)",
    )
    model.add_argument(
        "--pipeline", action="store_true", help="save the pipeline that takes raw records (default: the classifier on codes)"
    )
    model.add_argument(
        "--calibrate",
        metavar="CSV",
        help="a labelled public sample, comma-separated with a header row (the spec's columns and its label, "
        "such as the sample the spec was drafted from): the class probabilities' temperature is fitted to its "
        "log-loss, since real records show what the service's bootstrap cannot (dependent features). "
        "Predictions do not change; a discrete model only",
    )
    model.add_argument(
        "--pool-sample",
        action="store_true",
        help="with --calibrate: pool the sample's counts into the class prior and every conditional, each "
        "class share weighted by the inverse of its variance (the reports' from the service's estimates): "
        "where the reports are noisy the model becomes mostly the sample's Naive Bayes, where they are "
        "precise mostly theirs. Predictions may change",
    )

    enroll = common(sub.add_parser(
        "enroll", help="issue single-use enrollment tokens (for a shuffled collection: codes that obtain anonymous tokens)",
        allow_abbrev=False,
    ))  # fmt: skip
    enroll.add_argument("id", help="the collection's id, created with --enrollment")
    enroll.add_argument("--count", type=positive_int, required=True, help="how many tokens: one per person who may report")
    enroll.add_argument("--out", required=True, help="file to write, one token per line")


class Service:
    """The service at ``url``, with the admin token."""

    def __init__(self, url: str, token: str | None):
        self.url = url.rstrip("/")
        self.token = token

    async def call(self, session, method: str, path: str, body=None, admin: bool = True):
        """The JSON answer; raises :class:`OperatorError` with the service's own message on an error."""
        import aiohttp

        headers = {}
        if admin:
            if not self.token:
                raise OperatorError("the admin token is needed: set $LDPNB_ADMIN_TOKEN or pass --admin-token-file")
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            async with session.request(method, self.url + path, json=body, headers=headers) as response:
                try:
                    data = await response.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    data = None
                if response.status >= 400:
                    message = data.get("error") if isinstance(data, dict) else await response.text()
                    raise OperatorError(f"the service answered {response.status}: {message}")
                return data
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise OperatorError(f"cannot reach the service at {self.url}: {type(exc).__name__}: {exc}") from None


async def _create(service: Service, session, args) -> str:
    try:
        spec = json.loads(Path(args.spec).read_text())
    except (OSError, ValueError) as exc:
        raise OperatorError(f"cannot read the spec {args.spec}: {exc}") from None
    body = {"spec": spec, "min_reports": args.min_reports, "enrollment": args.enrollment}
    if args.id:
        body["id"] = args.id
    if args.shuffler is not None:
        if not args.shuffler_token_file:
            raise OperatorError("--shuffler needs --shuffler-token-file: the token the shuffler presents")
        body["shuffler"] = {"url": args.shuffler.rstrip("/"), "token": _secret_file(args.shuffler_token_file)}
        given = (("min_batch", args.min_batch), ("delta", args.delta), ("dummies", args.dummies))
        body["shuffler"] |= {k: v for k, v in given if v is not None}
    elif args.shuffler_token_file or args.min_batch is not None or args.delta is not None or args.dummies is not None:
        raise OperatorError("--shuffler-token-file, --min-batch, --delta and --dummies go with --shuffler URL")
    created = await service.call(session, "POST", "/collections", body)
    published = await service.call(session, "GET", f"/collections/{created['id']}", admin=False)
    return f"created {created['id']}\n{published['privacy']}"


def _secret_file(path: str) -> str:
    """The first line of ``path`` (``--shuffler-token-file``), which only its owner may read."""
    try:
        return secret_line(path, "--shuffler-token-file")
    except ValueError as exc:
        raise OperatorError(str(exc)) from None


async def _keys(service: Service, session, args) -> str:
    if args.rotate:
        key = await service.call(session, "POST", "/keys")
        return f"new sealing key {key['id']}: {key['public_key']} (collections created from now on name it)"
    key = await service.call(session, "GET", "/keys", admin=False)
    return f"current sealing key {key['id']}: {key['public_key']} (X25519, HKDF-SHA256, AES-128-GCM)"


async def _close(service: Service, session, args) -> str:
    published = await service.call(session, "GET", f"/collections/{args.id}", admin=False)
    shuffle = published["spec"].get("shuffle")
    if not shuffle or not shuffle.get("url"):
        raise OperatorError(f"collection {args.id!r} is not shuffled: there is nothing waiting elsewhere to release")
    shuffler = Service(shuffle["url"], _secret_file(args.shuffler_token_file))
    done = await shuffler.call(session, "POST", f"/collections/{args.id}/close", {"pad": args.pad})
    padded = f", {done['padding']:,} dummies in place of people missing from the last" if done["padding"] else ""
    left = (
        f"; {done['waiting']:,} fewer than a batch still wait: close again with --pad to release them with dummies in "
        "place of the people missing"
    )  # fmt: skip
    return (
        f"closed {args.id} at {shuffle['url']}: {done['people']:,} people's reports released in {done['batches']:,} "
        f"batches{padded}; it takes no more reports" + (left if done.get("waiting") else "")
    )


async def _list(service: Service, session, args) -> str:
    rows, path = [], "/collections?limit=1000"
    while path:
        page = await service.call(session, "GET", path)
        rows += page["collections"]
        path = page.get("next")
    if not rows:
        return "no collections"
    lines = [f"{'id':<24} {'protocol':<8} {'eps/person':>10} {'people':>10} {'release at':>10}  state"]
    for c in rows:
        state = "released" if c["released"] else "collecting"
        if c.get("dummies"):
            state += f" (and {c['dummies']:,} dummies)"
        lines.append(
            f"{c['id']:<24} {c['protocol']:<8} {c['epsilon_per_person']:>10g} {c.get('people', c['reports']):>10,} "
            f"{c['min_reports']:>10,}  {state}"
        )
    return "\n".join(lines)


async def _status(service: Service, session, args) -> str:
    from tqdm import tqdm

    path = f"/collections/{args.id}/status"
    first = await service.call(session, "GET", path)
    began = time.monotonic()
    if args.wait and not first["released"]:
        # disable=None: a bar on a terminal, nothing in a pipe or a log.
        bar = tqdm(total=first["min_reports"], initial=first.get("people", first["reports"]), desc=f"{args.id}: people", disable=None)
        with bar:
            current = first
            while not current["released"]:
                await asyncio.sleep(args.interval)
                current = await service.call(session, "GET", path)
                bar.update(current.get("people", current["reports"]) - bar.n)
    else:
        await asyncio.sleep(args.interval)
    second = await service.call(session, "GET", path)
    people = second.get("people", second["reports"])
    rate = (people - first.get("people", first["reports"])) / (time.monotonic() - began)
    share = min(1.0, people / second["min_reports"]) if second["min_reports"] else 1.0
    beside = f" (and {second['dummies']:,} of the shuffler's dummies)" if second.get("dummies") else ""
    needed = f" of {second['min_reports']:,} needed ({share:.0%})" if second["min_reports"] else " (no minimum: released from the first)"
    lines = [
        f"{args.id}: {people:,} people's reports{beside}{needed}, "
        f"{'released' if second['released'] else 'collecting'}; {rate:,.1f} people/s now; "
        f"epsilon {second['epsilon_per_person']:g} per person",
        f"{'input':<24} {'reports':>10} {'z':>8}  flag",
    ]
    checks = {c["input"]: c for c in second["plausibility"].get("inputs", [])}
    for item in second["inputs"]:
        check = checks.get(item["name"], {})
        z = check.get("z")
        lines.append(
            f"{item['name']:<24} {item['reports']:>10,} {('%.2f' % z) if z is not None else '-':>8}  "
            f"{'IMPLAUSIBLE' if check.get('flagged') else ''}"
        )
    lines.append(
        f"z: standard deviations between the input's aggregate and what honest reports give, whatever their "
        f"data; |z| > {Z_THRESHOLD:g} flags it (- : no check for this protocol)"
    )
    if second["flagged"]:
        lines.append("warning: some aggregates are implausible for any honest population (possible poisoning)")
    shuffler = second.get("shuffler")
    if shuffler is not None:
        told = (
            f"batches of at least {shuffler['min_batch']:,} people's reports and {shuffler['dummies']:,} dummies, "
            f"{shuffler['forwarded']:,} people's reports forwarded (it tells nobody how many wait)"
            f"{'; closed' if shuffler.get('closed') else ''}"
            if "error" not in shuffler else shuffler["error"]
        )
        lines.append(f"shuffler {shuffler['url']}: {told}; {second['reports']:,} counted here")
        batches = second.get("batches") or {}
        if batches.get("batches"):
            lines.append(
                f"{batches['batches']:,} batches taken: {batches['reports']:,} reports, {batches['dummies']:,} of them the "
                f"shuffler's dummies, {batches['junk']:,} junk (did not open: nobody's, yet counted in a batch's size)"
            )
            if batches["junk"]:
                lines.append(
                    "warning: junk in a batch means fewer people shuffled together than its size says; the guarantee "
                    "against a flooding aggregator (the dummies') still holds"
                )
    return "\n".join(lines)


async def _model(service: Service, session, args) -> str:
    import joblib

    if args.pool_sample and not args.calibrate:  # a usage error, before asking the service
        raise OperatorError("--pool-sample goes with --calibrate SAMPLE.csv")
    path = f"/collections/{args.id}/model?estimator={args.estimator}"
    data = await service.call(session, "GET", path, admin=False)
    published = await service.call(session, "GET", f"/collections/{args.id}", admin=False)
    model = model_from_dict(data)
    noise = None
    if args.pool_sample:
        if not data.get("evidence"):
            raise OperatorError("--pool-sample needs the class prior's standard errors, and this model has no evidence")
        estimates = await service.call(session, "GET", f"/collections/{args.id}/estimates", admin=False)
        noise = (data["evidence"], estimates)
    calibration = calibrate(model, args.calibrate, noise) if args.calibrate else None
    if calibration:
        model = calibration.pop("model")
    estimator = model.to_sklearn_pipeline() if args.pipeline else model.to_sklearn()
    out = Path(args.out)
    try:
        joblib.dump(estimator, out)
    except OSError as exc:
        raise OperatorError(f"cannot write {out}: {exc}") from None
    if hasattr(model, "class_count"):  # discrete: the estimated counts behind the priors
        counts = model.class_count
        prior = counts / counts.sum()
    else:  # gaussian: the estimated priors
        prior = model.class_prior
        counts = prior * data["reports"]
    card = {
        "collection": args.id,
        "uid": published["uid"],
        "spec_fingerprint": published["fingerprint"],
        "epsilon_per_person": model.spec.epsilon_per_person,
        "privacy": published["privacy"],
        "reports": data["reports"],
        "estimator": args.estimator,
        "estimated_people_per_class": dict(zip(model.spec.classes, map(float, counts))),
        "class_prior": dict(zip(model.spec.classes, map(float, prior))),
        "collection_created_at": datetime.fromtimestamp(published["created_at"], timezone.utc).isoformat(),
        "model_saved_at": datetime.now(timezone.utc).isoformat(),
        "file": out.name,
        "kind": type(estimator).__name__,
        "takes": "raw records (a pipeline)" if args.pipeline else "ordinal codes of the spec's categories",
    }
    if hasattr(model, "temperature"):  # discrete: the exported log-probabilities are scaled by it
        card["strength"] = model.strength
        card["temperature"] = model.temperature
        card["temperature_note"] = (
            "class_log_prior_ and feature_log_prob_ hold the model's log-probabilities times the temperature, "
            "so predict_proba gives the model's class probabilities; predict does not depend on it"
        )
    if calibration:
        card["temperature_fitted"] = calibration
    if data.get("evidence"):  # what the reports can tell the model
        card["evidence"] = data["evidence"]
    card_path = out.with_suffix(".card.json")
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    saved = f"saved {type(estimator).__name__} to {out} (joblib) and its model card to {card_path}"
    if calibration:
        saved += (
            f"\ntemperature {calibration['service_temperature']:.3g} -> {calibration['temperature']:.3g}, fitted on "
            f"{calibration['rows']} rows of {args.calibrate}: their log-loss {calibration['log_loss_before']:.3f} -> "
            f"{calibration['log_loss_after']:.3f} nats per record"
        )
        if "pooled" in calibration:
            shares = ", ".join(f"{c} {v:.3f}" for c, v in calibration["pooled"]["class_prior"].items())
            saved += (
                f"\nclass prior and conditionals pooled with the sample's {calibration['rows']} rows "
                f"(class prior {shares}): {calibration['pooled']['served_right']} -> "
                f"{calibration['pooled']['pooled_right']} sample rows right"
            )
    return f"{saved}\n{card['evidence']['summary']}" if "evidence" in card else saved


def calibrate(model, path: str, noise: tuple[dict, dict] | None = None) -> dict:
    """``model`` (discrete) at the temperature with the least log-loss on the labelled sample in
    the CSV file at ``path``, under ``"model"``, with what the model card records: the sample's
    rows, the service's temperature and the fitted one, and the sample's log-loss under the
    served model and the fitted one. With ``noise`` (the model's evidence and the service's
    estimates, whose standard errors and variances say how noisy the reports are) the class prior
    and every conditional are first pooled with the sample's counts
    (:func:`~aggregator.estimation.sample.pooled_with_sample`), and the card records the pooled prior and the
    sample rows each model classifies right (they are the rows it was pooled with)."""
    import csv

    import numpy as np

    from participant import RecordError
    from participant.encoding import encode_features

    from ..estimation.calibration import expected_log_loss, fitted_temperature
    from ..estimation.model import NaiveBayesModel
    from ..estimation.sample import pooled_with_sample, report_share_variances

    if not isinstance(model, NaiveBayesModel):
        raise OperatorError("--calibrate applies to a discrete model: a Gaussian one has no temperature")
    spec = model.spec
    columns = [f.name for f in (spec.continuous.inputs if spec.continuous else spec.features)]
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise OperatorError(f"--calibrate {path}: cannot read it ({exc})") from None
    missing = [c for c in [*columns, spec.label] if not rows or c not in rows[0]]
    if missing:
        raise OperatorError(f"--calibrate {path}: no rows, or no column {', '.join(missing)} (the spec's)")
    classes = {c: i for i, c in enumerate(spec.classes)}
    unknown = sorted(map(str, {r[spec.label] for r in rows} - set(classes)))  # a short row's is None
    if unknown:
        raise OperatorError(f"--calibrate {path}: labels {unknown} are not the spec's classes {list(classes)}")
    try:
        values = np.array([[r[c] for c in columns] for r in rows], dtype=object)
        codes = encode_features(values, spec)  # numerical columns are parsed as the preparation reads them
    except (RecordError, ValueError) as exc:
        raise OperatorError(f"--calibrate {path}: {exc}") from None
    labels = np.array([classes[r[spec.label]] for r in rows])
    truth = np.eye(len(classes))[labels]
    served = model.joint_log_likelihood_codes(codes)
    (before,) = expected_log_loss(served, truth, [model.temperature])
    found: dict = {"rows": len(rows), "service_temperature": model.temperature}
    if noise:
        evidence, estimates = noise
        errors = np.array([evidence["class_prior_standard_error"][c] for c in spec.classes])
        inputs = estimates["inputs"]
        variances = report_share_variances(
            spec, [np.asarray(i["estimate"], dtype=float) for i in inputs], [i["reports"] for i in inputs],
            model.class_prior,
        )  # fmt: skip
        pooled = pooled_with_sample(model, errors, variances, codes, labels)
        found["pooled"] = {
            "class_prior": dict(zip(spec.classes, pooled.class_prior.tolist())),
            "served_right": int((served.argmax(axis=1) == labels).sum()),
            "pooled_right": int((pooled.joint_log_likelihood_codes(codes).argmax(axis=1) == labels).sum()),
        }
        model = pooled
    temperature, losses = fitted_temperature(model.joint_log_likelihood_codes(codes), labels)
    return {
        "model": NaiveBayesModel(spec, model.class_count, model.category_count, temperature, model.strength),
        **found,
        "temperature": temperature,
        "log_loss_before": float(before),
        "log_loss_after": float(losses.min()),
    }


async def _enroll(service: Service, session, args) -> str:
    from tqdm import tqdm

    if args.count < 1:
        raise OperatorError("--count must be at least 1")
    # The file is opened before any token is asked for, so a path that cannot be written fails at
    # once, not after a long --count (the tokens are credentials: never printed instead). An existing
    # file is emptied only once the tokens are in hand; one this run created goes if it fails.
    existed = os.path.exists(args.out)
    try:
        fd = os.open(args.out, os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError as exc:
        raise OperatorError(f"--out {args.out}: cannot write there ({exc.strerror or exc})") from None
    with os.fdopen(fd, "w") as f:
        try:
            os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT: take others' access away
            tokens: list[str] = []
            with tqdm(total=args.count, desc=f"{args.id}: tokens", unit="token", disable=None) as bar:
                while len(tokens) < args.count:
                    n = min(ENROLL_CHUNK, args.count - len(tokens))
                    answer = await service.call(session, "POST", f"/collections/{args.id}/enrollments", {"count": n})
                    tokens += answer["tokens"]
                    bar.update(n)
        except BaseException:
            if not existed:
                os.unlink(args.out)
            raise
        f.truncate(0)
        f.write("\n".join(tokens) + "\n")
    return f"wrote {len(tokens)} tokens to {args.out}"


COMMANDS = {
    "create": _create, "list": _list, "status": _status, "model": _model, "enroll": _enroll, "keys": _keys, "close": _close,
}  # fmt: skip


def run(args) -> str:
    """Run the operator subcommand ``args.command``; returns what to print."""
    import aiohttp

    service = Service(args.url, args.token_reader(args))

    async def go():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            return await COMMANDS[args.command](service, session, args)

    return asyncio.run(go())
