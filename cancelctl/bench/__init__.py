"""Benchmarks behind `cancelctl bench`, each a ratio against a quantity measured in the same run:

    losses     fwd+bwd of every loss, wrapper and DFPO transform (`cancelctl bench losses`)
    intervals  coverage of the report's intervals at the lab's seed spreads (benchmarks/bench_intervals.py,
               tests/stats/test_intervals.py; not a verb)

The scripts in benchmarks/ measure the rest (tracking, report, monitor, verl) and are not verbs.
"""
