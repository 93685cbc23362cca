"""Counters of reports accepted, duplicated and rejected, in the Prometheus text format."""

from __future__ import annotations

from collections import Counter

UNKNOWN_COLLECTION = "_unknown"


class Metrics:
    """In-memory counters since the process started (Prometheus counters reset on restart)."""

    def __init__(self):
        self.accepted: Counter[str] = Counter()
        self.duplicate: Counter[str] = Counter()
        self.rejected: Counter[tuple[str, str]] = Counter()

    def reject(self, collection: str, reason: str, count: int = 1) -> None:
        self.rejected[(collection, reason)] += count

    def render(self, stored_reports: dict[str, int], implausible: dict[str, bool]) -> str:
        """The exposition text; ``stored_reports`` maps collection id to reports counted in total,
        ``implausible`` to whether its reports fail the poisoning checks."""
        lines = [
            "# HELP ldpnb_reports_accepted_total Reports stored and counted since the service started.",
            "# TYPE ldpnb_reports_accepted_total counter",
            *(f'ldpnb_reports_accepted_total{{collection="{c}"}} {n}' for c, n in sorted(self.accepted.items())),
            "# HELP ldpnb_reports_duplicate_total Reports whose id was already stored (not counted again).",
            "# TYPE ldpnb_reports_duplicate_total counter",
            *(f'ldpnb_reports_duplicate_total{{collection="{c}"}} {n}' for c, n in sorted(self.duplicate.items())),
            "# HELP ldpnb_reports_rejected_total Reports refused, by reason (nothing was counted).",
            "# TYPE ldpnb_reports_rejected_total counter",
            *(
                f'ldpnb_reports_rejected_total{{collection="{c}",reason="{r}"}} {n}'
                for (c, r), n in sorted(self.rejected.items())
            ),
            "# HELP ldpnb_collection_reports Reports counted in each collection's statistics.",
            "# TYPE ldpnb_collection_reports gauge",
            *(f'ldpnb_collection_reports{{collection="{c}"}} {n}' for c, n in sorted(stored_reports.items())),
            "# HELP ldpnb_collection_implausible 1 when the collection's reports fail a poisoning check.",
            "# TYPE ldpnb_collection_implausible gauge",
            *(f'ldpnb_collection_implausible{{collection="{c}"}} {int(f)}' for c, f in sorted(implausible.items())),
        ]
        return "\n".join(lines) + "\n"
