"""Benchmarks behind `cancelctl bench`, each a ratio against a quantity measured in the same run:

    losses     fwd+bwd of every loss, wrapper and DFPO transform (`cancelctl bench losses`)

The scripts in benchmarks/ measure the rest (tracking, report, monitor, verl, the report's interval
coverage) and are not verbs.
"""
