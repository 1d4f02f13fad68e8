"""Index one Qdrant Edge shard's segments, in a process of its own.

qdrant-edge-py 0.9.0 holds the GIL for the whole of ``EdgeShard.optimize()`` (5 s at
20 000 points of 384 dimensions, 30-45 s at 100 000 here): run in the service, it
would stop every other thread, recall included. A rebuild therefore closes the generation it
is building and runs this file as a script (``python -P edge_optimizer.py SHARD PARENT
SEGMENT_KB SEGMENTS SPARSE``), so the process imports nothing of the package but what it
needs. ``SEGMENT_KB`` and ``SEGMENTS`` are the optimizer's segment size and target
segment count (0: the engine's own), ``SPARSE`` the name of the shard's BM25 vector
(the engine takes a configuration only with a vector it can check).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import qdrant_edge as qe

from tht.faults import crash_point, pause_point

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(
            "usage: edge_optimizer.py SHARD_PATH PARENT_PID SEGMENT_KB SEGMENTS SPARSE",
            file=sys.stderr,
        )
        return 2
    path, parent, segment_kb, segments, sparse = (
        argv[0],
        int(argv[1]),
        int(argv[2]),
        int(argv[3]),
        argv[4],
    )
    # Killed with the thread that started it (a service killed with -9 leaves no
    # optimizer writing into a generation the next rebuild may remove or reuse).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's kill still applies
        pass
    if os.getppid() != parent:  # the parent died before the signal was asked for
        return 3
    config = qe.EdgeConfig(
        sparse_vectors={sparse: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(
            max_segment_size=segment_kb, default_segment_number=segments
        ),
    )
    shard = qe.EdgeShard.load(path, config)
    try:
        crash_point("edge.optimizing")
        pause_point("edge.optimizing")  # a test acts while the shard is being indexed
        shard.optimize()
    finally:
        shard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
