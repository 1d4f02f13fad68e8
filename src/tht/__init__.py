"""Thoth Memory: the reusable knowledge of a text-to-SQL agent, per workspace.

``from tht import Memory``: the Python client (tht.memory_client), imported on first
use so that ``import tht`` stays cheap for the command-line client."""

from tht.lazy import lazy_exports

__version__ = "0.1.0"
__all__ = ["Memory"]

__getattr__ = lazy_exports("tht", {"Memory": "tht.memory_client"})
