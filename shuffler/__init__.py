"""The shuffler: a separate party between devices and the aggregator, so that reports reach the
aggregator anonymous (``python -m shuffler serve``).

It takes sealed reports from devices (:mod:`participant.sealing`: it can read none of them),
stores each before acknowledging it, and releases a collection's reports to the aggregator only
in batches of at least the collection's floor, each with the shuffler's own dummy reports, in a
uniformly random order drawn from the operating system's CSPRNG, at a fixed interval. It keeps no
address, header or arrival time with a report, and once a batch is forwarded none of its bytes.

The aggregator is the party the shuffler hides people from, so nothing it says is taken on trust
beyond one first answer per collection: the shuffler pins each collection's view (its spec, uid,
key, floor and dummies) the first time it is asked and publishes it; devices report under that
view alone, and every report carries its digest.

- :mod:`.views`: pinning a collection's view from the aggregator, once;
- :mod:`.limits`: what one address, one collection and one body may cost;
- :mod:`.release`: drawing batches with their dummies, and forwarding them;
- :mod:`.store`: the SQLite store, and why nothing acknowledged is lost, forwarded into a smaller
  batch, or kept once forwarded;
- :mod:`.service`: the HTTP service devices and anyone else ask;
- :mod:`.cli`: ``python -m shuffler serve``.

Run it as someone other than the aggregator's operator: a shuffler that tells the aggregator who
sent what gives the reports no anonymity (each keeps its local ε).

Imports: ``participant`` (specs, views, sealing, dummies) and ``protocols`` below it; never
``aggregator`` (a shuffler is not the aggregator's code), ``sim`` or ``bench``.
"""
