"""Counters of reports accepted, duplicated and rejected, in the Prometheus text format
(rendered by prometheus-client, which escapes label values)."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

UNKNOWN_COLLECTION = "_unknown"
ALL = "_all"


class Metrics:
    """In-memory counters since the process started (Prometheus counters reset on restart).

    Series carry a collection label only with ``per_collection``: the collection ids, their sizes
    and their plausibility are otherwise not for anyone who can reach ``/metrics``.
    """

    def __init__(self, per_collection: bool = False):
        self.per_collection = per_collection
        self.accepted: Counter[str] = Counter()
        self.duplicate: Counter[str] = Counter()
        self.rejected: Counter[tuple[str, str]] = Counter()
        self.batches: Counter[str] = Counter()
        self.junk: Counter[str] = Counter()

    def _label(self, collection: str) -> str:
        return collection if self.per_collection else ALL

    def accept(self, collection: str, count: int = 1) -> None:
        self.accepted[self._label(collection)] += count

    def duplicated(self, collection: str, count: int = 1) -> None:
        self.duplicate[self._label(collection)] += count

    def reject(self, collection: str, reason: str, count: int = 1) -> None:
        self.rejected[(self._label(collection), reason)] += count

    def shuffled_batch(self, collection: str, junk: int) -> None:
        """A shuffled batch taken, of which ``junk`` reports did not open or were refused."""
        self.batches[self._label(collection)] += 1
        self.junk[self._label(collection)] += junk

    def render(self, stored_reports: dict[str, int], implausible: dict[str, bool], people: dict[str, int] | None = None) -> bytes:
        """The exposition text; ``stored_reports`` maps collection id to reports counted in total,
        ``people`` to how many of them are people's (the rest a shuffler's dummies; all of them
        when absent), ``implausible`` to whether its reports fail the poisoning checks (per
        collection only with ``per_collection``; otherwise their totals)."""
        people = stored_reports if people is None else people
        families = []
        accepted = CounterMetricFamily(
            "ldpnb_reports_accepted", "Reports stored and counted since the service started.", labels=["collection"]
        )
        for c, n in sorted(self.accepted.items()):
            accepted.add_metric([c], n)
        duplicate = CounterMetricFamily(
            "ldpnb_reports_duplicate", "Reports whose id was already stored (not counted again).", labels=["collection"]
        )
        for c, n in sorted(self.duplicate.items()):
            duplicate.add_metric([c], n)
        rejected = CounterMetricFamily(
            "ldpnb_reports_rejected", "Reports refused, by reason (nothing was counted).", labels=["collection", "reason"]
        )
        for (c, r), n in sorted(self.rejected.items()):
            rejected.add_metric([c, r], n)
        batches = CounterMetricFamily(
            "ldpnb_shuffled_batches", "Shuffled batches taken from shufflers since the service started.", labels=["collection"]
        )
        for c, n in sorted(self.batches.items()):
            batches.add_metric([c], n)
        junk = CounterMetricFamily(
            "ldpnb_shuffled_junk",
            "Reports of shuffled batches that did not open or were refused: not a person's, yet counted in the "
            "batch's size.",
            labels=["collection"],
        )
        for c, n in sorted(self.junk.items()):
            junk.add_metric([c], n)
        families += [accepted, duplicate, rejected, batches, junk]
        if self.per_collection:
            reports = GaugeMetricFamily(
                "ldpnb_collection_reports", "Reports counted in each collection's statistics.", labels=["collection"]
            )
            flags = GaugeMetricFamily(
                "ldpnb_collection_implausible",
                "1 when the collection's reports fail a poisoning check.",
                labels=["collection"],
            )
            persons = GaugeMetricFamily(
                "ldpnb_collection_people",
                "People's reports counted in each collection (its reports less its shufflers' dummies).",
                labels=["collection"],
            )
            for c, n in sorted(stored_reports.items()):
                reports.add_metric([c], n)
                persons.add_metric([c], people.get(c, n))
            for c, f in sorted(implausible.items()):
                flags.add_metric([c], int(f))
            families += [reports, persons, flags]
        else:
            families.append(GaugeMetricFamily("ldpnb_reports", "Reports counted in all collections.", value=sum(stored_reports.values())))
            families.append(
                GaugeMetricFamily(
                    "ldpnb_people", "People's reports counted in all collections (shufflers' dummies left out).",
                    value=sum(people.get(c, n) for c, n in stored_reports.items()),
                )
            )  # fmt: skip
            families.append(
                GaugeMetricFamily(
                    "ldpnb_collections_implausible",
                    "Collections whose reports fail a poisoning check.",
                    value=sum(map(int, implausible.values())),
                )
            )
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(families))
        # The process's CPU, memory and file descriptors, and the garbage collector's passes.
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
        return generate_latest(registry)


class _Fixed:
    """A collector that yields families already built."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)
