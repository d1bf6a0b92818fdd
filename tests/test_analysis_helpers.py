"""Support for the analysis tests: a hand-checkable topology and hand-written event logs.

`HandTopology` implements the documented Topology API subset analysis uses (n_links,
n_hosts, host_router, has_paths, latency, path_links) on a tiny router graph with unique
shortest paths, so every expected number in the tests can be derived by hand. It is read
in Spark workers through `read_hand_topology` (pickled by value, see `spark` fixture).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

LAN_US = 1000


class HandTopology:
    def __init__(self, edges, delays_us, host_router, has_paths=True):
        self.edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        self.delays_us = np.asarray(delays_us, dtype=np.int64)
        self.host_router = np.asarray(host_router, dtype=np.int32)
        self.has_paths = bool(has_paths)
        self.n_hosts = len(self.host_router)
        n_edges = len(self.edges)
        self.n_links = 2 * n_edges + 2 * self.n_hosts
        g = nx.Graph()
        for e, (u, v) in enumerate(self.edges.tolist()):
            g.add_edge(u, v, weight=int(self.delays_us[e]), e=e)
        self._graph = g

    def _core(self, ra, rb):
        nodes = nx.shortest_path(self._graph, int(ra), int(rb), weight="weight")
        links, delay = [], 0
        for u, v in itertools.pairwise(nodes):
            e = self._graph.edges[u, v]["e"]
            links.append(2 * e if (self.edges[e, 0], self.edges[e, 1]) == (u, v) else 2 * e + 1)
            delay += self._graph.edges[u, v]["weight"]
        return links, delay

    def latency(self, src, dst):
        src, dst = np.atleast_1d(src), np.atleast_1d(dst)
        return np.array([0 if a == b else 2 * LAN_US + self._core(self.host_router[a],
                                                                   self.host_router[b])[1]
                         for a, b in zip(src.tolist(), dst.tolist(), strict=False)], dtype=np.int64)

    def route_links(self, src_routers, dst_routers):
        """(pair index, directed core link) rows in path order, like Topology.route_links."""
        if not self.has_paths:
            raise ValueError("latency matrix: no paths")
        pairs, links = [], []
        for i, (ra, rb) in enumerate(zip(np.ravel(src_routers).tolist(),
                                         np.ravel(dst_routers).tolist(), strict=False)):
            core, _ = self._core(ra, rb) if ra != rb else ([], 0)
            pairs += [i] * len(core)
            links += core
        return np.array(pairs, dtype=np.int64), np.array(links, dtype=np.int64)

    def path_links(self, a, b):
        base = 2 * len(self.edges)
        core, _ = self._core(self.host_router[a], self.host_router[b])
        return np.array([base + 2 * a, *core, base + 2 * b + 1], dtype=np.int64)

    def save(self, path):
        np.savez(path, edges=self.edges, delays_us=self.delays_us,
                 host_router=self.host_router, has_paths=np.array(self.has_paths))


def read_hand_topology(path):
    z = np.load(path)
    return HandTopology(z["edges"], z["delays_us"], z["host_router"], bool(z["has_paths"]))


# Routers r0 - r1 - r2 and r1 - r3; core delays 10, 10, 5 ms. Hosts 0..5 on routers
# 0, 0, 1, 2, 3, 2. Directed core links: r0->r1 0, r1->r0 1, r1->r2 2, r2->r1 3, r1->r3 4,
# r3->r1 5; LAN base 6: host h uplink 6 + 2h, downlink 7 + 2h.
EDGES = [(0, 1), (1, 2), (1, 3)]
DELAYS = [10_000, 10_000, 5_000]
HOST_ROUTER = [0, 0, 1, 2, 3, 2]

# group 0: rank 1, RP/source 0, members 1..4, tree 0->1, 0->2, 2->3, 2->4
# group 1: rank 2, RP/source 3, members 4, 5, tree 3->4, 4->5 (collapsed: 3->4, 3->5)
SCRIBE_TREE = [(0, 0, 1), (0, 0, 2), (0, 2, 3), (0, 2, 4), (1, 3, 4), (1, 4, 5)]
COLLAPSED_TREE = [(0, 0, 1), (0, 0, 2), (0, 2, 3), (0, 2, 4), (1, 3, 4), (1, 3, 5)]
PUBLISH = {0: 1_000, 1: 5_000}
# Scribe delays along the tree (hand-summed host latencies)
SCRIBE_DELAY = {(0, 1): 2_000, (0, 2): 12_000, (0, 3): 24_000, (0, 4): 19_000,
                (1, 4): 17_000, (1, 5): 34_000}
IP_DELAY = {(0, 1): 2_000, (0, 2): 12_000, (0, 3): 22_000, (0, 4): 17_000,
            (1, 4): 17_000, (1, 5): 2_000}


def _write(run_dir: Path, table: str, phase: str, columns: dict, types: dict, topo: int = 0):
    arrays = {"phase": pa.array([phase] * len(next(iter(columns.values()))), pa.string())}
    arrays.update({c: pa.array(v, types[c]) for c, v in columns.items()})
    out = run_dir / "events" / table / f"topo={topo}"
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(arrays), out / f"{phase}-shard0.parquet")


I8, I4, I2, S = pa.int64(), pa.int32(), pa.int16(), pa.string()


# the Scribe type codes of actors/scribe/types.py, as the hand run's type table names them
SCRIBE_CODES = {"scribe_create": 60, "scribe_join": 61, "scribe_join_ack": 62,
                "scribe_mcast": 66, "scribe_data": 68}


def write_hand_run(run_dir: Path, has_paths: bool = True, topo: int = 0,
                   scribe_codes: dict[str, int] | None = None, pastry_b: int = 4) -> Path:
    """A run directory with the hand topology and its event logs (Parquet).

    scribe_codes: the codes the run's protocols gave the Scribe types (default
    SCRIBE_CODES), written into the message and route rows and the type table; pastry_b:
    `[pastry] b` of the run's config.toml."""
    code = {**SCRIBE_CODES, **(scribe_codes or {})}
    (run_dir / "topology").mkdir(parents=True, exist_ok=True)
    HandTopology(EDGES, DELAYS, HOST_ROUTER, has_paths).save(
        run_dir / "topology" / f"topo-{topo}.npz")
    (run_dir / "config.toml").write_text(
        f'scenario = "hand"\nnodes = 6\n\n[pastry]\nb = {pastry_b}\n')
    def w(table, phase, cols, types):
        _write(run_dir, table, phase, cols, types, topo)

    w("host", "setup", {"node": list(range(6)), "router": HOST_ROUTER,
                        "id_hex": [f"{i:032x}" for i in range(6)]},
      {"node": I4, "router": I4, "id_hex": S})
    w("group", "create", {"group": [0, 1], "rank": [1, 2], "size": [4, 2], "rp": [0, 3],
                          "creator": [0, 3], "id_hex": ["a" * 32, "b" * 32]},
      {"group": I4, "rank": I4, "size": I4, "rp": I4, "creator": I4, "id_hex": S})
    w("membership", "join", {"group": [0, 0, 0, 0, 1, 1], "member": [1, 2, 3, 4, 4, 5]},
      {"group": I4, "member": I4})
    tree_types = {"group": I4, "parent": I4, "child": I4, "variant": S}
    for phase in ("join", "multicast"):   # the same snapshot twice: counted once
        w("tree_edge", phase, {"group": [g for g, _, _ in SCRIBE_TREE],
                               "parent": [p for _, p, _ in SCRIBE_TREE],
                               "child": [c for _, _, c in SCRIBE_TREE],
                               "variant": ["scribe"] * len(SCRIBE_TREE)}, tree_types)
    w("tree_edge", "collapse", {"group": [g for g, _, _ in COLLAPSED_TREE],
                                "parent": [p for _, p, _ in COLLAPSED_TREE],
                                "child": [c for _, _, c in COLLAPSED_TREE],
                                "variant": ["collapsed"] * len(COLLAPSED_TREE)}, tree_types)
    msg_types = {"time": I8, "arrival": I8, "type": I2, "src": I4, "dst": I4, "group": I4}
    data = [(g, p, c) for g, p, c in SCRIBE_TREE]
    w("message", "multicast", {
        "time": [100] * 7, "arrival": [200] * 7,
        "type": [code["scribe_data"]] * 6 + [code["scribe_join_ack"]],
        "src": [p for _, p, _ in data] + [0], "dst": [c for _, _, c in data] + [5],
        "group": [g for g, _, _ in data] + [0]}, msg_types)
    w("message", "join", {"time": [1], "arrival": [2], "type": [code["scribe_join"]],
                          "src": [1], "dst": [0],
                          "group": [0]}, msg_types)
    # maintenance hops: a test protocol's code and a Pastry code named by the run's
    # message_type table, a reliable-range code the table lacks (named by its range)
    w("message", "maintenance", {"time": [1, 2, 3, 4], "arrival": [3, 4, 5, 6],
                                 "type": [201, 201, 24, 95], "src": [1, 2, 3, 4],
                                 "dst": [2, 3, 4, 5], "group": [-1] * 4}, msg_types)
    names = {201: "test_ping", 24: "pastry_row_req", **{c: n for n, c in code.items()}}
    w("message_type", "setup", {"type": sorted(names), "name": [names[c] for c in sorted(names)]},
      {"type": I2, "name": S})
    rows = [(g, m, PUBLISH[g] + d) for (g, m), d in SCRIBE_DELAY.items()]
    rows.append((0, 3, PUBLISH[0] + 999_999))            # late duplicate of the same message
    rows.append((0, 0, PUBLISH[0]))                      # the source itself: left out
    w("delivery", "multicast", {
        "group": [g for g, _, _ in rows], "member": [m for _, m, _ in rows],
        "source": [0 if g == 0 else 3 for g, _, _ in rows],
        "publish_time": [PUBLISH[g] for g, _, _ in rows], "time": [t for _, _, t in rows],
        "hops": [1] * len(rows), "seqno": [0] * len(rows), "variant": ["scribe"] * len(rows)},
      {"group": I4, "member": I4, "source": I4, "publish_time": I8, "time": I8, "hops": I2,
       "seqno": I8, "variant": S})
    w("route", "join", {"origin": [1, 4, 5, 0], "root": [0, 0, 3, 0],
                        "type": [code["scribe_join"]] * 3 + [code["scribe_create"]],
                        "start": [0, 0, 0, 0], "end": [5, 5, 5, 5], "hops": [1, 2, 3, 0],
                        "path_us": [2000, 4000, 6000, 0]},
      {"origin": I4, "root": I4, "type": I2, "start": I8, "end": I8, "hops": I2, "path_us": I8})
    w("probe", "bottleneck", {"node": [4, 4], "target": [2, 3], "group": [0, 0],
                              "time": [10, 11]},
      {"node": I4, "target": I4, "group": I4, "time": I8})
    return run_dir
