"""The oracle's exact PNS state for a run's topology, computed in a process of its own.

scenarios/phases.py starts it beside the protocol bootstrap's join, whose table-quality
check compares the joined overlay with it: it depends on the topology, the node ids and
Pastry's b, l and m alone. It runs in a session of its own, so a Ctrl-C at the terminal
reaches only the driver, which stops it.

    python -m scenarios.oracle_job TOPOLOGY_NPZ NODES SEED B L M OUT_NPZ

writes ``rt``, ``leaf``, ``nbr`` and ``b`` (``actors.pastry.state.PastryState``) to OUT_NPZ
(through a temporary file, renamed when complete).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def compute(topology: Path, nodes: int, seed: int, b: int, l: int, m: int):  # noqa: E741
    """The oracle state of ``nodes`` nodes with the ids of ``seed`` on the topology saved at
    ``topology``. O(the oracle's computation)."""
    from actors.pastry.ids import node_ids
    from actors.pastry.oracle import oracle_state
    from topologies.topology import Topology

    topo = Topology.load(topology)
    ids_hi, ids_lo = node_ids(nodes, seed)
    return oracle_state(np.arange(nodes), ids_hi, ids_lo, topo.host_router, topo.dist_matrix(),
                        topo.lan_us, b=b, l=l, m=m)


def main(argv: list[str]) -> None:
    topology, nodes, seed, b, l, m, out = argv  # noqa: E741
    state = compute(Path(topology), int(nodes), int(seed), int(b), int(l), int(m))
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(tmp, rt=state.rt, leaf=state.leaf, nbr=state.nbr, b=np.int64(state.b))
    tmp.replace(out)


if __name__ == "__main__":
    main(sys.argv[1:])
