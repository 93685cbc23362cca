"""A griffe extension for the API reference: Sphinx cross-reference roles in docstrings
(``:class:`~participant.limits.Limits```, ``:meth:`codes```) become links.

The docstrings are written for Python's own tools (``help()``, IDEs), which read Sphinx roles;
mkdocstrings renders them as Markdown, where a role would show raw. Each role becomes an
mkdocs-autorefs reference marked optional: a link when its target is documented on the site,
plain code when it is not (a private helper, another library).
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of a loaded package once the whole package is known, so that a
    name a role gives relative to its object resolves like Python would resolve it there."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for obj in _documented(pkg):
            obj.docstring.value = ROLE.sub(lambda match: _reference(obj, match), obj.docstring.value)


def _documented(obj: griffe.Object):
    """``obj`` and its members, recursively, that carry a docstring (aliases are left to their target)."""
    if obj.docstring is not None:
        yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _documented(member)


def _reference(obj: griffe.Object, match: re.Match) -> str:
    """The HTML of one role: an optional autoref to the name it resolves to, shown as written
    (its last part alone after ``~``)."""
    short, name = match.group(1) == "~", match.group(2).strip().removesuffix("()")
    shown = html.escape(name.rsplit(".", 1)[-1] if short else name)
    target = _resolve(obj, name)
    if target is None:
        return f"<code>{shown}</code>"
    return f'<autoref identifier="{html.escape(target)}" optional><code>{shown}</code></autoref>'


def _resolve(obj: griffe.Object, name: str) -> str | None:
    """The full path ``name`` stands for in ``obj``'s scope, or None."""
    head, _, rest = name.partition(".")
    scope = obj if obj.is_class or obj.is_module else obj.parent
    try:
        resolved = scope.resolve(head) if scope is not None else head
    except (griffe.NameResolutionError, AttributeError):
        resolved = head if "." in name else None
    if resolved is None:
        return None
    return f"{resolved}.{rest}" if rest else resolved
