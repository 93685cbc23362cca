"""The command lines' argument parser: a mistake is one line and exit code 2.

``argparse`` prints the whole usage block before an error (16 to 19 lines for a mistyped ε);
git and ripgrep print the error and a hint. Every command of ``python -m aggregator``,
``python -m sim`` and ``python -m shuffler`` builds its parser from :class:`Parser` (its
subcommands inherit it). It lives here, the lowest layer with a command line above it, because
the shuffler stands on the participant package alone.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``PROG: error: MESSAGE (see PROG --help)``,
    naming the closest option or command when one was mistyped (``did you mean --port?``)."""

    _given: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # Unrecognised arguments belong to the command that was chosen: its usage, its options.
            owner = _chosen(self, parsed)
            owner._given = self._given
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str):
        hint = _suggestion(self, message)
        self.exit(2, f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            sys.stderr.write(message if message.endswith("\n") else message + "\n")
        raise SystemExit(status)


def _chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest subcommand's parser that ``parsed`` chose (``parser`` itself when none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(parsed, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], parsed)
    return parser


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``"; did you mean X?"`` for the first mistyped command or option in what was given, or ``""``."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        choices = {c.casefold(): c for c in re.findall(r"'([^']*)'", choice.group(2))}  # 'ou': 'OUE'
        close = difflib.get_close_matches(choice.group(1).casefold(), list(choices), n=1)
        return f"; did you mean {choices[close[0]]!r}?" if close else ""
    known = [option for action in parser._actions for option in action.option_strings]
    for token in getattr(parser, "_given", []):
        name = token.split("=", 1)[0]
        if not name.startswith("--") or name == "--" or any(o.startswith(name) for o in known):
            continue
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        if close:
            # Equally similar names: the one sharing the longest start (--epz: --eps, not --sep).
            best = max(close, key=lambda option: len(os.path.commonprefix([option, name])))
            return f"; did you mean {best}?"
    return ""


def secret_line(path: str, option: str) -> str:
    """The first line of ``path``, a secret an option names (a token file): ValueError, naming
    ``option``, when it cannot be read or when others than its owner may read it (as ssh refuses
    such a key)."""
    try:
        with open(path) as f:
            mode = os.fstat(f.fileno()).st_mode & 0o777
            if mode & 0o077:
                raise ValueError(f"{option} {path} is readable by others (mode {mode:04o}); chmod 600 {path}")
            return f.readline().rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"cannot read {option} {path}: {exc.strerror or exc}") from None


def number(low: float | None = None, high: float | None = None, *, whole: bool = False, open_ends: str = ""):
    """An argparse ``type``: a number (an integer if ``whole``) in ``[low, high]``, either end left
    out for none, and open where ``open_ends`` holds ``"low"`` or ``"high"``. A refusal says what
    was expected and what came: ``expected a whole number, got 'abc'``, ``must lie in (0, 1), got 2``."""
    kind = "a whole number" if whole else "a number"

    def parse(text: str):
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        below = low is not None and (value <= low if "low" in open_ends else value < low)
        above = high is not None and (value >= high if "high" in open_ends else value > high)
        if below or above:
            raise argparse.ArgumentTypeError(f"must {_range(low, high, open_ends)}, got {text}")
        return value

    return parse


def _range(low, high, open_ends: str) -> str:
    if high is None:
        return f"be {'greater than' if 'low' in open_ends else 'at least'} {low:g}"
    if low is None:
        return f"be {'less than' if 'high' in open_ends else 'at most'} {high:g}"
    return f"lie in {'(' if 'low' in open_ends else '['}{low:g}, {high:g}{')' if 'high' in open_ends else ']'}"


positive_int = number(1, whole=True)
non_negative_int = number(0, whole=True)
positive_number = number(0, open_ends="low")
share = number(0, 1, open_ends="low high")  # a share strictly between 0 and 1 (θ, a class share)


def listed(choices=None, kind=str, otherwise: str = ""):
    """An argparse ``type``: comma-separated values (each converted by ``kind``), every one among
    ``choices`` when given; a refusal names the value and what is accepted (then ``otherwise``,
    another way to give it)."""

    def parse(text: str) -> list:
        values = []
        for item in (x.strip() for x in text.split(",")):
            if not item:
                continue
            try:
                value = kind(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {item!r}") from None
            if choices is not None and value not in choices:
                accepted = ", ".join(map(str, choices))
                raise argparse.ArgumentTypeError(f"unknown value {item!r}: choose from {accepted}{otherwise}")
            values.append(value)
        if not values:
            raise argparse.ArgumentTypeError("give at least one value")
        return values

    return parse


def folded(choices):
    """An argparse ``type``: the one of ``choices`` that ``text`` names whatever its case (``oue``
    is ``OUE``), else ``text`` unchanged, for ``choices=`` to refuse with its list and the closest."""
    by_folded = {str(choice).casefold(): choice for choice in choices}

    def parse(text: str):
        return by_folded.get(text.strip().casefold(), text)

    parse.__name__ = "str"
    return parse


def die_with_parent() -> None:
    """A worker process's initializer: on Linux, the kernel ends this process when the one that
    started it ends, even by SIGKILL (a pool's idle worker holds its own queue open and would
    otherwise outlive its service). Elsewhere nothing."""
    import signal

    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before the signal was asked for
        os._exit(1)


def add_connection_options(parser) -> None:
    """Add to ``parser`` the options both services take for their connections:
    ``--keepalive-timeout``, ``--body-timeout``, ``--max-connections`` and
    ``--max-connections-per-address`` (the handlers read the body timeout; the rest go to
    :class:`~participant.serving.CappedRunner` and aiohttp)."""
    parser.add_argument(
        "--keepalive-timeout", type=positive_number, default=15.0, metavar="S",
        help="seconds a connection may stay open without a complete request: idle, or sending headers slowly "
        "(default 15)",
    )  # fmt: skip
    parser.add_argument(
        "--max-connections", type=positive_int, default=1024, metavar="N",
        help="connections open at once; a further one is answered 503 and closed (default 1024)",
    )  # fmt: skip
    parser.add_argument(
        "--body-timeout", type=positive_number, default=30.0, metavar="S",
        help="seconds to receive a request body (default 30)",
    )  # fmt: skip
    parser.add_argument(
        "--max-connections-per-address", type=positive_int, default=256, metavar="N",
        help="connections open at once from one network (by default an IPv4 /24 or IPv6 /64; trusted proxies "
        "excepted); a further one is answered 503 and closed, so one party cannot starve the others (default 256)",
    )  # fmt: skip
