"""``python -m bench.micro``: in-process costs, one component at a time (see ``bench/README.md``).

``python -m bench`` measures the gateway over HTTP beside a bare passthrough; what costs a few
microseconds in a request of several hundred is below its resolution on a shared machine, so
this measures the pieces in one process instead, each subcommand one kind of figure
(:mod:`bench.micro.cli`).
"""
