"""The install's extras: the device library needs only the core; the aggregator and the simulator
say, in one line, which extra they need when it is missing."""

from __future__ import annotations

import importlib.util
import sys


def require_extra(package: str, extra: str, modules: list[str]) -> None:
    """Return if every module in ``modules`` is installed; otherwise raise ``ModuleNotFoundError``
    naming ``pip install 'ldpnb[extra]'`` (or, under ``python -m package``, print that one line and
    exit with status 2)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    message = f"ldpnb's {package} needs the {extra!r} extra (missing {', '.join(missing)}): pip install 'ldpnb[{extra}]'"
    if sys.argv[:1] == ["-m"]:  # set so while `python -m package` imports the package
        print(f"python -m {package}: error: {message}", file=sys.stderr)
        raise SystemExit(2)
    raise ModuleNotFoundError(message)
