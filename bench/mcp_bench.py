"""`tht mcp` as an MCP client starts it: wall time from spawning the server to the first
tool answer (initialize, list_tools, one memory_search), then the time of later calls,
with the SDK's own stdio client.

Variants take turns on one fresh THT_HOME with the embedded engines (this machine is
noisy): the stdio server forwarding to a warm service (the default), the same with
THT_SERVICE=off (every engine in the MCP process), and a plain `tht memory search` for
reference. The import of the MCP SDK alone is timed too: it is most of the thin
server's start.

    .venv/bin/python bench/mcp_bench.py --cards 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from service_bench import THT, Home


async def _mcp_session(home: Home, config: str, calls: int, **env: str) -> tuple[float, float]:
    """Seconds to the first answer, and the median of ``calls`` later calls."""
    rng = random.Random(5)
    server = StdioServerParameters(
        command=THT[0], args=[*THT[1:], "mcp", "-c", config], env={**home.env, **env}
    )
    started = time.perf_counter()
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        result = await session.call_tool("memory_search", {"question": home.question(rng)})
        first = time.perf_counter() - started
        assert not result.is_error, result
        later = []
        for _ in range(calls):
            began = time.perf_counter()
            result = await session.call_tool("memory_search", {"question": home.question(rng)})
            later.append(time.perf_counter() - began)
            assert not result.is_error, result
    return first, statistics.median(later)


def _sdk_import() -> float:
    probe = "import time; t = time.perf_counter(); import mcp.server.lowlevel, mcp.server.stdio; print(time.perf_counter() - t)"
    return float(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="later calls per session")
    args = parser.parse_args()
    home = Home("hashing")
    try:
        config = home.load("bench", args.cards)
        figures: dict[str, list[float]] = {
            "service: first answer": [],
            "service: later call (median)": [],
            "off: first answer": [],
            "off: later call (median)": [],
            "cli search via service": [],
            "mcp sdk import": [],
        }
        rng = random.Random(3)
        for _ in range(args.rounds):
            home.tht("memory", "search", "warm up", "-c", config)  # the service up and warm
            first, later = anyio.run(_mcp_session, home, config, args.calls)
            figures["service: first answer"].append(first)
            figures["service: later call (median)"].append(later)
            code, document, elapsed = home.tht("memory", "search", home.question(rng), "-c", config)
            assert code == 0, document
            figures["cli search via service"].append(elapsed)
            home.stop_service()  # the embedded index admits one process
            first, later = anyio.run(
                lambda: _mcp_session(home, config, args.calls, THT_SERVICE="off")
            )
            figures["off: first answer"].append(first)
            figures["off: later call (median)"].append(later)
            figures["mcp sdk import"].append(_sdk_import())
        report = {
            "cards": args.cards,
            "rounds": args.rounds,
            "median_ms": {
                name: round(statistics.median(v) * 1000, 1) for name, v in figures.items()
            },
        }
        median = report["median_ms"]
        report["off_over_service_first_answer"] = round(
            median["off: first answer"] / median["service: first answer"], 2
        )
        print(json.dumps(report, indent=2))
    finally:
        home.close()


if __name__ == "__main__":
    main()
