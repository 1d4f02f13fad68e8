"""Thoth Memory: the reusable knowledge of a text-to-SQL agent, per workspace."""

__version__ = "0.1.0"
