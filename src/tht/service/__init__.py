"""The service: one warm process per installation owns the engines; every face is thin.

Modules here that the command-line client imports (``paths``, ``client``) use only the
standard library: a command that runs in the service must not pay for pydantic,
psycopg, numpy or the index engines.
"""
