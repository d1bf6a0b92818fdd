"""The churn schedule's RP failures (`churn.rp_failures`): distinct RPs of streaming groups
fail for good inside the stream, never a source; 0 leaves the random schedule alone (pure
numpy, no Ray)."""

import numpy as np

from scenarios import load_scenario
from scenarios.churn import churn_schedule
from scenarios.groups import plan_groups

T0 = 10_000_000


def schedule(rp_failures: int, stream_groups: int = 0):
    cfg = load_scenario("churn", nodes=400, groups=8, sets=[
        f"churn.rp_failures={rp_failures}", f"churn.stream_groups={stream_groups}"])
    plan = plan_groups(cfg.name, "zipf", cfg.nodes, cfg.groups, cfg.seed, 0)
    rp = np.random.default_rng(5).choice(cfg.nodes, cfg.groups, replace=False)  # any RPs
    return cfg, rp, churn_schedule(cfg, 0, T0, rp, plan)


def test_rp_failures_kill_distinct_rps_for_good_within_the_stream():
    cfg, rp, s = schedule(3, stream_groups=6)
    c = cfg.churn
    hit = np.isin(s["fail_node"], rp[:6])
    assert hit.sum() >= 3
    killed = s["fail_node"][hit][:3]
    assert len(set(killed.tolist())) == 3
    t = s["fail_time"][hit][:3]
    assert (t >= T0 + c["warmup_us"]).all() and (t <= T0 + 2 * c["duration_us"] // 3).all()
    assert not np.isin(killed, s["rec_node"]).any()          # for good
    assert not np.isin(s["fail_node"], s["pub_source"]).any()  # sources never fail
    assert not np.isin(rp[6:], killed).any()                  # only streaming groups' RPs


def test_rp_failures_come_on_top_of_the_random_failures():
    _, _, a = schedule(0)
    _, rp, b = schedule(2)
    # the random failures draw from their own stream: the same times, two more failures
    assert len(b["fail_time"]) == len(a["fail_time"]) + 2
    assert set(a["fail_time"].tolist()) <= set(b["fail_time"].tolist())
    assert np.array_equal(a["rec_time"], b["rec_time"])
    extra = ~np.isin(b["fail_time"], a["fail_time"])
    assert np.isin(b["fail_node"][extra], rp).all()
