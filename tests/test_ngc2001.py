"""The NGC 2001 publish/subscribe scenarios: subscription counts, the LAN-slot
host placement, the core-delay target and the pub/sub vocabulary (fast: no Ray, no Spark)."""

import numpy as np
import pytest

import cli
from analysis.vocabulary import TERMS, translate, translator, vocabulary_of
from scenarios import ScenarioError, load_scenario
from scenarios.config import PLACEMENTS, VOCABULARIES
from scenarios.groups import group_sizes, plan_groups
from topologies import PLACEMENTS as TOPO_PLACEMENTS
from topologies import (
    TopologyError,
    attach_hosts,
    generate_transit_stub,
    place_hosts,
    scale_mean_delay,
)

NGC = ["ngc2001_topics_60k", "ngc2001_topics_60k_ts600"]


@pytest.mark.parametrize("name", NGC)
def test_subscription_counts_match_the_paper(name):
    """NGC 2001 section 4.1: 60,000 subscribers for rank 1, 6 for rank 1,500, 237,154 in
    all -- from the scenario's own configuration, and as drawn for topology 0."""
    cfg = load_scenario(name)
    g = cfg.groups_cfg
    sizes = group_sizes(g["kind"], cfg.nodes, cfg.groups, g["exponent"], g["size"])
    assert (cfg.nodes, cfg.groups) == (60_000, 1_500)
    assert sizes[0] == 60_000 and sizes[-1] == 6 and int(sizes.sum()) == 237_154
    plan = plan_groups(cfg.name, g["kind"], cfg.nodes, cfg.groups, cfg.seed, 0,
                       g["exponent"], g["size"])
    assert len(plan.member_node) == 237_154
    assert np.array_equal(np.bincount(plan.member_group, minlength=cfg.groups), sizes)


@pytest.mark.parametrize("name", NGC)
def test_scenarios_follow_section_4_1(name):
    cfg = load_scenario(name)
    t = cfg.topology
    assert t["source"] == ("ts600" if name.endswith("ts600") else "ts5050")
    assert (t["placement"], t["lan_hosts_per_router"]) == ("lan_slots", 100)
    assert t["lan_us"] == 1000 and t["mean_core_delay_ms"] == 40.5
    assert (cfg.pastry["b"], cfg.pastry["l"], cfg.pastry["m"]) == (4, 16, 32)
    assert {"collapse", "multicast_collapsed"} <= set(cfg.phase_order)
    assert cfg.report["vocabulary"] == "pubsub"


def test_lan_slots_on_ts600_put_exactly_100_nodes_on_every_router():
    g = generate_transit_stub(preset="ts600", seed=1)
    topo = attach_hosts(g, 60_000, seed=1, placement="lan_slots", lan_hosts_per_router=100)
    assert np.array_equal(np.bincount(topo.host_router, minlength=600), np.full(600, 100))


def test_lan_slots_on_ts5050_are_a_uniform_sample_of_505000_slots():
    hr = place_hosts(5050, 60_000, seed=1, placement="lan_slots", lan_hosts_per_router=100)
    counts = np.bincount(hr, minlength=5050)
    assert counts.sum() == 60_000 and counts.max() <= 100
    # hypergeometric per router: mean 60000/5050 = 11.88, variance ~ 10.5 (binomial 11.9)
    assert counts.mean() == pytest.approx(60_000 / 5050)
    assert 9.0 < counts.var() < 12.0
    # per seed: same seed same placement, another seed another one
    assert np.array_equal(hr, place_hosts(5050, 60_000, 1, "lan_slots", 100))
    assert not np.array_equal(hr, place_hosts(5050, 60_000, 2, "lan_slots", 100))
    # small LANs bind: 3 slots per router, 15,000 hosts -> no router above 3
    assert np.bincount(place_hosts(5050, 15_000, 1, "lan_slots", 3)).max() == 3


def test_uniform_placement_is_unchanged():
    """The default keeps every existing scenario's hosts (and results) bit-identical: one
    uniform router draw per host from the host stream, as before the option existed."""
    hr = place_hosts(5050, 10_000, seed=7)
    old = np.random.default_rng([7, 0x4057]).integers(0, 5050, size=10_000).astype(np.int32)
    assert np.array_equal(hr, old)
    assert load_scenario("quick").topology["placement"] == "uniform"
    assert load_scenario("quick").topology["mean_core_delay_ms"] == 0.0


def test_placement_errors_are_one_clear_line():
    with pytest.raises(TopologyError, match="do not fit in 600 routers x 100 LAN slots"):
        place_hosts(600, 60_001, placement="lan_slots", lan_hosts_per_router=100)
    with pytest.raises(TopologyError, match="unknown"):
        place_hosts(600, 10, placement="star")
    with pytest.raises(ScenarioError, match="exceeds the 60000 LAN slots of ts600"):
        load_scenario("ngc2001_topics_60k_ts600", nodes=60_001)
    with pytest.raises(ScenarioError, match="topology.placement"):
        load_scenario("quick", sets=["topology.placement=star"])
    assert PLACEMENTS == TOPO_PLACEMENTS


def test_mean_core_delay_target_scales_every_link_by_one_factor():
    g = generate_transit_stub(preset="ts600", seed=1)
    s = scale_mean_delay(g, 40_500)
    assert abs(s.edge_delay_us.mean() - 40_500) < 1.0
    factor = 40_500 / g.edge_delay_us.mean()
    assert np.all(np.abs(s.edge_delay_us - g.edge_delay_us * factor) <= 0.5 + 1e-9)
    assert np.array_equal(s.edge_policy, g.edge_policy) and s.n_edges == g.n_edges
    with pytest.raises(TopologyError, match="must be > 0"):
        scale_mean_delay(g, 0)


def test_pubsub_vocabulary_relabels_words_not_columns(tmp_path):
    assert set(VOCABULARIES) == set(TERMS)
    assert translate("RDP of the rank-1 group's members", "pubsub") == \
        "RDP of the rank-1 topic's subscribers"
    assert translate("Group size vs rank", "pubsub") == "Topic size vs rank"
    assert translate("one multicast message per group", "pubsub") == "one event per topic"
    # names of files and columns, and IP multicast, stay
    assert translate("group_size_by_rank.png, IP multicast", "pubsub") == \
        "group_size_by_rank.png, IP multicast"
    assert translate("groups", "groups") == "groups"
    assert vocabulary_of(tmp_path) == "groups"            # no config.toml
    (tmp_path / "config.toml").write_text(load_scenario("ngc2001_topics_60k").to_toml())
    assert vocabulary_of(tmp_path) == "pubsub"
    summary = {"scenario": "x", "nodes": 60_000, "groups": 1_500,
               "rdp_rank1_by_variant": {"scribe": {"median": 1.5}}}
    rows = dict(cli.summary_rows(summary, translator(tmp_path)))
    assert rows["topics"] == "1,500" and "groups" not in rows
    assert rows["RDP median, rank-1 topic's subscribers (scribe)"] == "1.5"
    assert "RDP median, rank-1 group's members (scribe)" in dict(cli.summary_rows(summary))
