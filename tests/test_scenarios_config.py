"""Scenario configs: every shipped TOML validates; Zipf sizes; overrides; bad input -> one
clear ScenarioError line naming the problem (fast: no Ray, no Spark)."""

import tomllib

import numpy as np
import pytest

from scenarios import ScenarioError, list_scenarios, load_scenario
from scenarios.config import PHASES, scenario_files
from scenarios.groups import join_times, plan_groups, zipf_sizes

SHIPPED = ["churn", "churn_reliable", "measured_internet", "paper_zipf_1500",
           "paper_zipf_1500_bottleneck", "quick", "small_groups_30k"]


def test_every_required_scenario_ships():
    assert set(SHIPPED) <= set(scenario_files())


@pytest.mark.parametrize("name", sorted(scenario_files()))
def test_every_toml_loads_validates_and_round_trips(name, tmp_path):
    if name == "measured_internet" and not (
            scenario_files()[name].parents[2] / "shared/data/measured").is_dir():
        with pytest.raises(ScenarioError, match="measured data file"):
            load_scenario(name)
        return
    cfg = load_scenario(name)
    assert cfg.name == name and cfg.description
    assert cfg.phase_order[0] == "bootstrap" and set(cfg.phase_order) <= set(PHASES)
    text = cfg.to_toml()
    tomllib.loads(text)                      # valid TOML
    p = tmp_path / "config.toml"
    p.write_text(text)
    again = load_scenario(str(p))
    assert again == cfg                      # the resolved config reproduces the run


def test_paper_scenarios_match_the_spec():
    z = load_scenario("paper_zipf_1500")
    assert (z.nodes, z.groups, z.topologies) == (100_000, 1500, 10)
    assert z.topology["source"] == "ts5050" and z.groups_cfg["kind"] == "zipf"
    assert z.groups_cfg["exponent"] == 1.25 and z.phase_order[-1] == "multicast"
    b = load_scenario("paper_zipf_1500_bottleneck")
    assert b.scribe["bottleneck"] and b.scribe["bottleneck_bound"] == 64
    assert "multicast_bottleneck" in b.phase_order and b.seed == z.seed
    p = load_scenario("paper_zipf_1500_protocol")    # the same experiment, overlay by protocol
    assert (p.nodes, p.groups, p.seed, p.topology, p.groups_cfg, p.phase_order) == (
        z.nodes, z.groups, z.seed, z.topology, z.groups_cfg, z.phase_order)
    assert p.pastry["join"] == "2002" and p.pastry["table_maintenance_us"] > 0
    assert p.pastry["join_rate_per_s"] == z.pastry["join_rate_per_s"] <= 100
    # the published experiments build their overlay by the 2001 join
    for name in ("paper_zipf_1500", "paper_zipf_1500_bottleneck", "small_groups_30k",
                 "ngc2001_topics_60k", "ngc2001_topics_60k_ts600", "churn", "churn_reliable"):
        pastry = load_scenario(name).pastry
        assert (pastry["bootstrap"], pastry["join"], pastry["join_exchange_rows"],
                pastry["table_maintenance_us"]) == ("protocol", "2001", 0, 0), name
    s = load_scenario("small_groups_30k")
    assert (s.nodes, s.groups, s.groups_cfg["kind"], s.groups_cfg["size"]) == (50_000, 30_000,
                                                                             "fixed", 11)
    assert s.phase_order[-2:] == ["collapse", "multicast_collapsed"]
    q = load_scenario("quick")
    assert {"collapse", "multicast_collapsed"} <= set(q.phase_order) and q.nodes <= 5000
    c, cr = load_scenario("churn"), load_scenario("churn_reliable")
    assert "churn" in c.phase_order
    assert c.pastry["keepalive_us"] > 0 and c.scribe["heartbeat_us"] > 0
    assert not c.scribe["reliable"] and cr.scribe["reliable"]


def test_zipf_sizes_for_100k_nodes():
    s = zipf_sizes(100_000, 1500, 1.25)
    print(f"sum of Zipf group sizes for N=100,000, G=1,500: {int(s.sum()):,}")
    assert s[0] == 100_000 and s[-1] == 11
    assert (np.diff(s) <= 0).all()
    assert s[1] == int(np.floor(100_000 * 2 ** -1.25 + 0.5))


def test_group_plan_members_uniform_without_replacement_and_per_seed():
    p = plan_groups("t", "zipf", 5000, 80, seed=3, topo=0)
    assert len(p.member_node) == p.sizes.sum()
    for g in (0, 1, 40, 79):
        m = p.members_of(g)
        assert len(m) == p.sizes[g] and len(np.unique(m)) == len(m)
        assert m.min() >= 0 and m.max() < 5000
    assert np.array_equal(p.members_of(0), np.arange(5000))   # rank 1 = everybody
    same = plan_groups("t", "zipf", 5000, 80, seed=3, topo=0)
    other = plan_groups("t", "zipf", 5000, 80, seed=3, topo=1)
    assert np.array_equal(same.member_node, p.member_node)
    assert not np.array_equal(other.members_of(5), p.members_of(5))
    # groupIds differ between topologies (names carry the topology index) and are unique
    ids = set(zip(p.table["id_hi"].tolist(), p.table["id_lo"].tolist(), strict=True))
    assert len(ids) == 80
    # uniformity: over 80 groups, member counts per node decile are balanced
    counts = np.bincount(p.member_node[p.member_group > 0] * 10 // 5000, minlength=10)
    assert counts.min() > 0.8 * counts.mean()
    f = plan_groups("t", "fixed", 300, 50, seed=1, topo=0, size=11)
    assert (f.sizes == 11).all() and len(f.member_node) == 550
    t = join_times(1, 0, 1000, 5_000, 100)
    assert t.min() >= 5_000 and t.max() < 5_100


def test_overrides_keywords_and_sets():
    c = load_scenario("paper_zipf_1500", nodes=3000, groups=60, topologies=2, seed=7, shards=3,
                      bootstrap="protocol",
                      sets=["pastry.l=32", "scribe.bottleneck_bound=32",
                            "topology.source=ts600", "phases.join_spread_us=250000",
                            "groups.exponent=1.1"])
    assert (c.nodes, c.groups, c.topologies, c.seed, c.shards) == (3000, 60, 2, 7, 3)
    assert c.pastry["bootstrap"] == "protocol" and c.pastry["l"] == 32
    assert c.scribe["bottleneck_bound"] == 32 and c.topology["source"] == "ts600"
    assert c.phases["join_spread_us"] == 250_000 and c.groups_cfg["exponent"] == 1.1
    # keyword overrides win over --set
    assert load_scenario("quick", nodes=500, sets=["run.nodes=900"]).nodes == 500
    # a list value
    q = load_scenario("quick", sets=['phases.order=["bootstrap","create","join","multicast"]'])
    assert q.phase_order == ["bootstrap", "create", "join", "multicast"]
    rate = load_scenario("quick", sets=["pastry.join_rate_per_s=50"]).pastry["join_rate_per_s"]
    assert rate == 50.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(sets=["pastry.nope=3"]), r"unknown key pastry\.nope; valid: bootstrap, b, l"),
    (dict(sets=["nosuch.key=3"]), r"unknown section 'nosuch'; valid: run, topology"),
    (dict(sets=["pastry.l"]), r"expected section\.key=value"),
    (dict(sets=["nodes=3"]), r"expected section\.key=value"),
    (dict(sets=["pastry.l="]), r"missing value"),
    (dict(sets=["pastry.l=abc"]), r"pastry\.l must be an integer, got 'abc'"),
    (dict(sets=["pastry.l=16.5"]), r"pastry\.l must be an integer"),
    (dict(sets=["scribe.bottleneck=1"]), r"scribe\.bottleneck must be true/false"),
    (dict(sets=["pastry.l=15"]), r"pastry\.l = 15 is out of range: an even integer >= 2 \("),
    (dict(sets=["pastry.b=3"]), r"pastry\.b = 3 is out of range: 1 \| 2 \| 4 \| 8 \| 16 \("),
    (dict(sets=["scribe.root_paths=maybe"]), r"scribe\.root_paths = 'maybe' is out of range: "
                                             r"auto \| on \| off"),
    (dict(bootstrap="magic"), r"pastry\.bootstrap = 'magic' is out of range: oracle \| protocol"),
    (dict(nodes=1), r"run\.nodes = 1 is out of range"),
    (dict(nodes=True), r"run\.nodes must be an integer"),
    (dict(shards=-1), r"run\.shards = -1 is out of range"),
    (dict(nodes=100, shards=101), r"run\.shards = 101 exceeds run\.nodes = 100"),
    (dict(nodes=100, groups=1000), r"run\.groups = 1000 is impossible with 100 nodes.*at most"),
    (dict(sets=["topology.partition=domain"]), r"partition.*locality \| random"),
    (dict(sets=["topology.source=ts9999"]), r"topology\.source 'ts9999' is unknown; use ts5050"),
    (dict(sets=["topology.source=rocketfuel:/nonexistent/x.cch:1239"]),
     r"measured data file /nonexistent/x\.cch not found"),
    (dict(sets=['phases.order=["bootstrap","join"]']), r"'join' needs 'create' before it"),
    (dict(sets=['phases.order=["create","join"]']), r"must start with 'bootstrap'"),
    (dict(sets=['phases.order=["bootstrap","create","fly"]']),
     r"unknown phase 'fly'; valid: bootstrap"),
    (dict(sets=['phases.order=["bootstrap","create","create"]']), r"'create' appears twice"),
    (dict(sets=["scribe.bottleneck=true"]), r"use 'multicast_bottleneck' instead"),
    (dict(sets=['phases.order=["bootstrap","create","join","churn"]']),
     r"'churn' needs pastry\.keepalive_us > 0"),
])
def test_bad_input_raises_one_clear_line(kwargs, match):
    with pytest.raises(ScenarioError, match=match) as e:
        load_scenario("quick", **kwargs)
    assert "\n" not in str(e.value)


def test_impossible_fixed_group_size():
    with pytest.raises(ScenarioError, match=r"groups\.size = 11 exceeds run\.nodes = 10"):
        load_scenario("small_groups_30k", nodes=10, groups=5, shards=1)


def test_unknown_scenario_and_bad_files(tmp_path):
    with pytest.raises(ScenarioError, match=r"unknown scenario 'nope'; choose one of .*quick"):
        load_scenario("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text("description = 'x'\n[run]\nnodes = 100\ncolour = 'red'\n")
    with pytest.raises(ScenarioError, match=r"unknown key run\.colour"):
        load_scenario(str(bad))
    bad.write_text("description = 'x'\n[fun]\nnodes = 100\n")
    with pytest.raises(ScenarioError, match=r"unknown section or key 'fun'"):
        load_scenario(str(bad))
    bad.write_text("description = 'x\n")
    with pytest.raises(ScenarioError, match=r"not valid TOML"):
        load_scenario(str(bad))
    with pytest.raises(ScenarioError, match=r"does not exist"):
        load_scenario(str(tmp_path / "missing.toml"))


def test_list_scenarios():
    infos = {i.name: i for i in list_scenarios()}
    assert set(SHIPPED) <= set(infos)
    assert infos["paper_zipf_1500"].nodes == 100_000 and infos["quick"].groups == 40


def test_protocol_params_are_the_schema_defaults_and_complete():
    """Outside a scenario, protocol_params gives the protocols' own declared defaults (the
    schema's, since it is composed of the declarations), and Pastry takes only complete
    parameter dicts."""
    from actors.pastry.protocol import PARAMETERS, Pastry
    from actors.scribe.application import PARAMETERS as SCRIBE_PARAMETERS
    from scenarios.config import protocol_params

    pastry, scribe = protocol_params(1000, 7)
    assert pastry == {**{k: p.default for k, p in PARAMETERS.items()}, "seed": 7}
    assert scribe == {k: p.default for k, p in SCRIBE_PARAMETERS.items()}
    # a scenario's settings go to the stack as they are, the rest at their defaults
    cfg = load_scenario("quick")
    assert cfg.pastry_params(7) == {**pastry, **cfg.pastry, "seed": 7}
    assert set(pastry) == set(PARAMETERS) | {"seed"}
    # a fixed arrival rate, whatever the size (no nodes / 10 fallback)
    assert protocol_params(3000)[0]["join_rate_per_s"] == 10.0
    assert protocol_params(3000, pastry={"join_rate_per_s": 300.0})[0]["join_rate_per_s"] \
        == 300.0
    Pastry(None, pastry)
    for bad, message in (({k: v for k, v in pastry.items() if k != "seed"}, "missing"),
                         ({**pastry, "colour": 1}, "unknown"),
                         ({**pastry, "hop_ack": True}, "hop_ack"),
                         ({**pastry, "rejoin_timeout_us": 0}, "rejoin_timeout_us"),
                         ({**pastry, "join_rate_per_s": 0.0}, "join_rate_per_s"),
                         ({**pastry, "join_contact_fallback": "node0"},
                          "join_contact_fallback"),
                         ({**pastry, "leaf_refresh_rounds": -1}, "leaf_refresh_rounds"),
                         ({**pastry, "table_maintenance_us": -1}, "table_maintenance_us")):
        with pytest.raises(ValueError, match=message) as err:
            Pastry(None, bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ScenarioError, match="pastry.hop_ack"):
        protocol_params(pastry={"hop_ack": "sometimes"})


def test_the_protocols_declare_their_parameters_and_the_schema_composes_them():
    """Each Pastry and Scribe parameter is declared once, by its protocol (type, default,
    valid values, help); the schema's [pastry] / [scribe] sections are those declarations,
    and a protocol given a bad value says so in the same words as a scenario file would."""
    from actors.pastry.protocol import PARAMETERS as PASTRY
    from actors.pastry.protocol import Pastry
    from actors.scribe.application import PARAMETERS as SCRIBE
    from actors.scribe.application import Scribe
    from scenarios.config import SCHEMA, protocol_params

    for section, declared in (("pastry", PASTRY), ("scribe", SCRIBE)):
        assert list(SCHEMA[section]) == list(declared)
        for k, p in declared.items():
            t, default, check, help_ = SCHEMA[section][k]
            assert (t, default, help_) == (p.type, p.default, p.describe())
            assert check is None or check(default), (section, k)
            assert "\n" not in help_
    pastry, scribe = protocol_params(100)
    with pytest.raises(ValueError) as e:
        Pastry(None, {**pastry, "l": 15})
    with pytest.raises(ScenarioError) as s:
        load_scenario("quick", sets=["pastry.l=15"])
    assert str(e.value) == "Pastry: " + str(s.value).removeprefix("pastry.")
    # Scribe takes a setting ("off", 0) or its own value (False, None) alike
    assert Scribe({**scribe, "root_paths": "off", "heartbeat_us": 0}).params == \
        Scribe({**scribe, "root_paths": False, "heartbeat_us": None}).params
    with pytest.raises(ValueError, match=r"^Scribe: heartbeat_us = -1 is out of range: an "
                                         r"integer >= 0 \(tree maintenance period"):
        Scribe({**scribe, "heartbeat_us": -1})


def test_join_arrivals_keep_their_rate_at_any_size():
    """The protocol bootstrap's arrivals are a fixed Poisson rate, not squeezed into a fixed
    span: 100k nodes arrive no faster than 2k."""
    from actors.pastry.join import join_schedule
    small = load_scenario("paper_zipf_1500", nodes=2000, groups=60, bootstrap="protocol")
    big = load_scenario("paper_zipf_1500", bootstrap="protocol")
    rates = [c.pastry_params(1)["join_rate_per_s"] for c in (small, big)]
    assert rates[0] == rates[1] == 50.0
    t = join_schedule(big.nodes, rates[1], 0, 1)
    # Poisson: the span is n / rate within a few percent, not 10 s
    assert abs(t[-1] / 1e6 - big.nodes / rates[1]) < 0.02 * big.nodes / rates[1]
    # a flash crowd is asked for explicitly
    crowd = load_scenario("paper_zipf_1500", sets=["pastry.join_rate_per_s=10000"])
    assert crowd.pastry_params(1)["join_rate_per_s"] == 10000.0
    with pytest.raises(ScenarioError, match=r"pastry\.join_rate_per_s = 0\.0 is out of range"):
        load_scenario("paper_zipf_1500", sets=["pastry.join_rate_per_s=0"])
    # the defaults are the cheapest set known to build the best tables: five leaf
    # refreshes per node, the nearest earlier arrival as the fallback contact, the 2001
    # join (no rows exchanged, no table maintenance)
    plain = load_scenario("quick", bootstrap="protocol")
    assert (plain.pastry["leaf_refresh_rounds"], plain.pastry["join_contact_fallback"],
            plain.pastry["join"], plain.pastry["join_exchange_rows"],
            plain.pastry["table_maintenance_us"]) == (5, "nearest", "2001", 0, 0)
    assert load_scenario("paper_zipf_1500", sets=["pastry.join_contact_fallback=first"]
                         ).pastry_params(1)["join_contact_fallback"] == "first"
    with pytest.raises(ScenarioError, match=r"pastry\.join_contact_fallback = 'node0'"):
        load_scenario("paper_zipf_1500", sets=["pastry.join_contact_fallback=node0"])


def test_join_is_chosen_by_name_and_its_settings_follow(tmp_path):
    """pastry.join names a set of join settings: it fills what is not given, refuses what
    contradicts it, and is inferred from the settings when not given (custom if none
    fits), so a config written before the name existed resolves to the same run."""
    keys = ("join", "join_exchange_rows", "table_maintenance_us")
    rich = load_scenario("quick", sets=["pastry.join=2002"])   # a bare 2002 is the name
    assert tuple(rich.pastry[k] for k in keys) == ("2002", 8, 900_000_000)
    with pytest.raises(ScenarioError, match=r"^pastry\.join_exchange_rows = 8 contradicts "
                                            r"pastry\.join = '2001', which sets 0"):
        load_scenario("quick", sets=["pastry.join=2001", "pastry.join_exchange_rows=8"])
    mixed = load_scenario("quick", sets=["pastry.join=custom", "pastry.join_exchange_rows=8"])
    assert tuple(mixed.pastry[k] for k in keys) == ("custom", 8, 0)
    # no name: inferred from the values the settings end up with
    assert load_scenario("quick", sets=["pastry.join_exchange_rows=8"]).pastry["join"] == \
        "custom"
    assert load_scenario("quick", sets=["pastry.join_exchange_rows=8",
                                        "pastry.table_maintenance_us=900000000"]
                         ).pastry["join"] == "2002"
    with pytest.raises(ScenarioError, match=r"pastry\.join = '1999' is out of range: "
                                            r"2001 \| 2002 \| custom"):
        load_scenario("quick", sets=["pastry.join=1999"])
    # a resolved config without the name (written before it existed) runs the same
    old = load_scenario("quick", sets=["pastry.join_exchange_rows=2"]).to_toml()
    old = "\n".join(line for line in old.splitlines() if not line.startswith("join = "))
    (tmp_path / "config.toml").write_text(old)
    again = load_scenario(str(tmp_path / "config.toml"))
    assert (again.pastry["join"], again.pastry["join_exchange_rows"]) == ("custom", 2)
    # the protocol refuses a contradiction in a complete dict too
    from actors.pastry.protocol import Pastry
    from scenarios.config import protocol_params
    pastry, _ = protocol_params()
    with pytest.raises(ValueError, match=r"^Pastry: join_exchange_rows = 8 contradicts "
                                         r"join = '2001'"):
        Pastry(None, {**pastry, "join_exchange_rows": 8})


def test_a_run_made_before_warmup_modes_can_be_reanalysed(tmp_path):
    # runs written when analysis.warmup was true/false (results/ holds some) keep working
    from scenarios.config import analysis_settings

    old = tmp_path / "config.toml"
    old.write_text("[analysis]\nwarmup = true\n")
    assert analysis_settings(old)["warmup"] == "on"
    old.write_text("[analysis]\nwarmup = false\n")
    assert analysis_settings(old)["warmup"] == "off"
    with pytest.raises(ScenarioError, match="analysis.warmup"):
        analysis_settings(None, ["analysis.warmup=maybe"])


def test_jit_mode_follows_the_run_size():
    from scenarios.analysis_spark import C1_MAX_NODE_TOPOLOGIES, jvm_conf

    c1 = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
          "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
    assert jvm_conf("auto", 2_000, 1) == c1
    assert jvm_conf("auto", 100_000, 3) == c1
    assert jvm_conf("auto", 100_000, 10) == {}          # ten paper topologies: C2 pays
    assert jvm_conf("auto", C1_MAX_NODE_TOPOLOGIES + 1, None) == {}
    assert jvm_conf("auto", None, None) == {}           # size unknown: Java's default
    assert jvm_conf("c1", 10**6, 10) == c1 and jvm_conf("tiered", 10, 1) == {}
    assert load_scenario("quick").analysis["jit"] == "auto"
    with pytest.raises(ScenarioError, match="analysis.jit"):
        load_scenario("quick", sets=["analysis.jit=c2"])
