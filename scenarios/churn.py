"""The churn phase's schedule: which groups stream, from which source, when each message is
published, which nodes fail and when they recover; deterministic in (seed, topology)."""

from __future__ import annotations

import numpy as np

from .config import ScenarioConfig
from .groups import GroupPlan

# the random stream of the churn schedule, apart from every other draw of the run
_STREAM_CHURN = 0xC4E2


def _stream_sources(rng, plan: GroupPlan, rp: np.ndarray, n_stream: int) -> np.ndarray:
    """Each streaming group's source: a uniformly drawn member other than its RP."""
    sources = np.empty(n_stream, np.int64)
    for g in range(n_stream):
        m = plan.members_of(g)
        m = m[m != rp[g]] if len(m) > 1 else m
        sources[g] = m[rng.integers(len(m))]
    return sources


def _rp_failures(cfg: ScenarioConfig, t: int, t0: int, rp_of_streams: np.ndarray,
                 protected: np.ndarray) -> tuple[list, list]:
    """RPs of streaming groups that fail for good, inside the first 2/3 of the stream (time
    left to fail over), from their own random stream (the random failures draw as they
    would without them). Returns (nodes, times), in time order."""
    c = cfg.churn
    if not c.get("rp_failures", 0):
        return [], []
    rrng = np.random.default_rng([cfg.seed, t, _STREAM_CHURN, 1])
    cand = np.unique(rp_of_streams[~protected[rp_of_streams]])
    pick = rrng.permutation(cand)[: c["rp_failures"]]
    lo, hi = t0 + c["warmup_us"], t0 + (2 * c["duration_us"]) // 3
    when = rrng.integers(lo, max(hi, lo + 1), len(pick))
    pairs = sorted(zip(pick.tolist(), when.tolist(), strict=True), key=lambda x: x[1])
    return [v for v, _ in pairs], [w for _, w in pairs]


def _random_failures(cfg: ScenarioConfig, rng, start: int, end: int, protected: np.ndarray,
                     down_until: np.ndarray):
    """Poisson failures of live unprotected nodes in [start, end), each recovering after an
    exponential downtime unless downtime_us = 0 or it would come after the end.
    ``down_until`` (per node: -1 alive, else until when) is updated. Yields
    (node, fail time, recovery time or None)."""
    c, never = cfg.churn, np.iinfo(np.int64).max
    rate, now = c["fail_rate_per_s"], start
    while rate > 0:
        now += int(np.ceil(rng.exponential(1e6 / rate)))
        if now >= end:
            return
        alive = (~protected) & ((down_until < 0) | (down_until <= now))
        cand = np.flatnonzero(alive)
        if len(cand) == 0:
            return
        v = int(cand[rng.integers(len(cand))])
        back = None
        if c["downtime_us"] > 0:
            back = now + max(1, int(np.ceil(rng.exponential(c["downtime_us"]))))
            back = back if back < end else None
        down_until[v] = never if back is None else back
        yield v, now, back


def churn_schedule(cfg: ScenarioConfig, t: int, t0: int, rp: np.ndarray, plan: GroupPlan):
    """The churn phase's stimuli, deterministic in (seed, t).

    Streaming groups multicast every interval from a fixed source: a member that never
    fails (so delivery ratios measure the tree, not a dead source); RPs and forwarders do
    fail. Failures: Poisson at fail_rate_per_s from t0 + warmup, each a uniformly chosen
    live non-source node; each recovers after an exponential downtime (mean downtime_us)
    unless downtime_us = 0; plus churn.rp_failures RPs failing for good.
    Returns dict of arrays: pub_group, pub_source, pub_time, fail_node, fail_time,
    rec_node, rec_time.
    """
    c = cfg.churn
    rng = np.random.default_rng([cfg.seed, t, _STREAM_CHURN])
    n_groups = plan.n_groups
    n_stream = n_groups if c["stream_groups"] == 0 else min(n_groups, c["stream_groups"])
    groups = np.arange(n_stream)
    sources = _stream_sources(rng, plan, rp, n_stream)
    protected = np.zeros(cfg.nodes, bool)
    protected[sources] = True
    end = t0 + c["duration_us"]
    ticks = np.arange(t0, end, c["multicast_interval_us"], dtype=np.int64)
    pub_group = np.tile(groups, len(ticks))
    fail_node, fail_time = _rp_failures(cfg, t, t0, rp[groups], protected)
    down_until = np.full(cfg.nodes, -1, np.int64)     # -1: alive; else recovery time (or max)
    down_until[fail_node] = np.iinfo(np.int64).max
    rec_node, rec_time = [], []
    for v, when, back in _random_failures(cfg, rng, t0 + c["warmup_us"], end, protected,
                                          down_until):
        fail_node.append(v)
        fail_time.append(when)
        if back is not None:
            rec_node.append(v)
            rec_time.append(back)
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return {"pub_group": pub_group, "pub_source": sources[pub_group],
            "pub_time": np.repeat(ticks, n_stream),
            "fail_node": i64(fail_node), "fail_time": i64(fail_time),
            "rec_node": i64(rec_node), "rec_time": i64(rec_time), "end": end}
