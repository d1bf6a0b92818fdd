"""The protocol bootstrap's first contacts (actors.pastry.join.nearby_contacts) against a
direct numpy statement of the rule: each joiner's contact is the earliest node of the
router nearest to its own among the routers with a node that had settled when it arrived
(or, with the "nearest" fallback, that had arrived before it), the first such router on
ties; node 0 when there is none; -1 for node 0 itself."""

from __future__ import annotations

import numpy as np
import pytest

from actors.pastry.join import nearby_contacts


def reference_contacts(joiners, times, settle_us, host_router, router_dist, fallback):
    routers, first_host = np.unique(host_router, return_index=True)
    o = np.argsort(first_host, kind="stable")
    routers, first_host = routers[o], first_host[o]
    out = np.zeros(len(joiners), np.int64)
    for k, j in enumerate(joiners):
        settled = np.flatnonzero(times + settle_us <= times[j])
        avail = settled[-1] + 1 if len(settled) else 0
        if avail == 0 and fallback == "nearest":
            avail = j
        cols = np.flatnonzero(first_host < avail)
        if j == 0:
            out[k] = -1
        elif len(cols) == 0:
            out[k] = 0
        else:
            d = router_dist[host_router[j], routers[cols]]
            out[k] = first_host[cols[np.argmin(d)]]
    return out


@pytest.mark.parametrize("fallback", ["first", "nearest"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_contacts_follow_the_rule(seed, fallback):
    rng = np.random.default_rng(seed)
    n, n_routers = 600, 40
    times = np.cumsum(rng.integers(0, 30_000, n))     # arrivals, some at the same time
    host_router = rng.integers(0, n_routers, n)
    dist = rng.integers(1, 8, (n_routers, n_routers)).astype(np.int32)   # many ties
    dist = np.minimum(dist, dist.T)
    np.fill_diagonal(dist, 0)
    dist.setflags(write=False)          # as the shards get it
    joiners = np.sort(rng.choice(n, 300, replace=False))
    joiners[0] = 0
    got = nearby_contacts(joiners, times, 100_000, host_router, dist, fallback)
    want = reference_contacts(joiners, times, 100_000, host_router, dist, fallback)
    assert (got == want).all()
    assert (got[1:] >= 0).all() and got[0] == -1
