"""Delivery under churn (SPEC 5, churn / failure scenarios): ratio over time, duplicates,
out-of-order deliveries, member outages (tree repair as members see it), RP fail-overs.

Inputs (event tables, docs/analysis.md "Churn"):
- `publish` (group, source, time, variant): every multicast the scenario issued; when the
  run has no publish rows, the messages are inferred from `delivery` (distinct (variant,
  group, source, publish_time)) and messages no member received are then invisible;
- `node_event` (node, time, event "fail" | "recover"): crashes and recoveries the scenario
  caused; a node is dead at t when it failed at or before t and has not recovered by t;
- `membership` (who was asked to join), `group` (the RP), `delivery`.
- `arrival` (reliable layer only): every copy the tree brought a member; `delivery` is then
  what the layer released to the application. The driver adds the arrivals as variant
  "<variant>:tree" (TREE_SUFFIX), so each figure exists for both streams.
A member is *surviving* when it never failed during the run (a crash loses the node's
Scribe state, subscriptions included; a recovered node does not re-subscribe). A delivery
is *expected* for (message, surviving member) when the member is in the group and is not
the source: every message of the stream (the run goes on `settle_us` after the last
publish, so each could still arrive). Members that failed are counted apart (`died_*`):
their expected messages are those published before their first failure. Messages are keyed
by (variant, group, source, publish_time): publish_time is the time the source issued the
multicast, identical in every copy, while seqnos differ between the plain and the reliable
layer.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

MESSAGE = ["topo", "variant", "group", "source", "publish_time"]
TREE_SUFFIX = ":tree"   # variant label of the raw tree arrivals (reliable layer)


def _in_phases(df: DataFrame, phases: tuple[str, ...] | None) -> DataFrame:
    return df if phases is None else df.where(F.col("phase").isin(list(phases)))


def published_messages(publish: DataFrame, delivery: DataFrame, inferred: bool,
                       phases: tuple[str, ...] | None = None) -> DataFrame:
    """The multicast stream: (topo, variant, group, source, publish_time), one row each.

    inferred=True takes the messages seen in `delivery` (the run logged no publish rows).
    """
    if inferred:
        return _in_phases(delivery, phases).select(*MESSAGE).distinct()
    return (_in_phases(publish, phases)
            .select("topo", "variant", "group", "source", F.col("time").alias("publish_time"))
            .distinct())


def dead_intervals(node_event: DataFrame) -> DataFrame:
    """(topo, node, dead_from, dead_until): from each failure to the node's next recovery
    (null: it never recovered). O(events log events) (one sort per node)."""
    w = (Window.partitionBy("topo", "node").orderBy("time")
         .rowsBetween(1, Window.unboundedFollowing))
    return (node_event
            .withColumn("next_recover", F.min(F.when(F.col("event") == "recover", F.col("time")))
                        .over(w))
            .where(F.col("event") == "fail")
            .select("topo", "node", F.col("time").alias("dead_from"),
                    F.col("next_recover").alias("dead_until")))


def _dead_at(rows: DataFrame, dead: DataFrame, node: str, time: str) -> DataFrame:
    """Rows of `rows` whose `node` column is dead at their `time` column (semi join)."""
    d = dead.withColumnRenamed("node", node)
    cond = ((rows["topo"] == d["topo"]) & (rows[node] == d[node])
            & (d["dead_from"] <= rows[time])
            & (d["dead_until"].isNull() | (rows[time] < d["dead_until"])))
    return rows.join(d, cond, "left_semi")


def first_failures(node_event: DataFrame) -> DataFrame:
    """(topo, member, failed_us): the first failure of each node that ever failed."""
    return (node_event.where(F.col("event") == "fail")
            .groupBy("topo", F.col("node").alias("member"))
            .agg(F.min("time").alias("failed_us")))


def _member_pairs(messages: DataFrame, membership: DataFrame) -> DataFrame:
    return (messages.join(membership.select("topo", "group", "member").distinct(),
                          ["topo", "group"])
            .where(F.col("member") != F.col("source")))


def member_deliveries(messages: DataFrame, membership: DataFrame,
                      failures: DataFrame) -> DataFrame:
    """(topo, variant, group, source, publish_time, member, failed_us): every message at every
    member of its group but the source, with the member's first failure (null: it never
    failed). `expected_deliveries` and `died_deliveries` are its two parts, so that one
    join of pairs and arrivals serves both."""
    return _member_pairs(messages, membership).join(failures, ["topo", "member"], "left")


def expected_deliveries(pairs: DataFrame) -> DataFrame:
    """The `member_deliveries` rows the stream should reach: every message, at every
    surviving member (never failed) of the group but the source."""
    return pairs.where(F.col("failed_us").isNull()).drop("failed_us")


def died_deliveries(pairs: DataFrame) -> DataFrame:
    """The `member_deliveries` rows of members that failed during the run, counted apart:
    the messages published before the member's first failure (it could not receive later
    ones: its subscription died with it)."""
    return pairs.where(F.col("publish_time") < F.col("failed_us")).drop("failed_us")


def surviving_arrivals(arrivals: DataFrame, failures: DataFrame) -> DataFrame:
    """First arrivals at surviving members only (duplicates and order are judged on them)."""
    return arrivals.join(failures.select("topo", "member"), ["topo", "member"], "left_anti")


STREAM = ["topo", "variant", "group", "source", "member"]   # one source's messages at a member


def first_arrivals(delivery: DataFrame, messages: DataFrame,
                   phases: tuple[str, ...] | None = None) -> DataFrame:
    """Deliveries of the stream's messages, one row per (message, member):
    arrival (first copy's time), copies (rows logged).

    Partitioned by STREAM (`out_of_order` needs no other shuffle).
    Schema: topo, variant, group, source, publish_time, member, arrival bigint,
    copies bigint.
    """
    # partitioned by the STREAM before the aggregate: (message, member) keys are finer, so
    # the aggregate and out_of_order's window share this one shuffle
    return (_in_phases(delivery, phases).join(messages, MESSAGE, "left_semi")
            .repartition(*STREAM)
            .groupBy(*MESSAGE, "member")
            .agg(F.min("time").alias("arrival"), F.count("*").alias("copies")))


def out_of_order(arrivals: DataFrame) -> DataFrame:
    """`first_arrivals` with out_of_order (int): 1 when an earlier message of the same
    source reached this member later than this one (its publish_time is below the largest
    publish_time the member had already received from that source).

    A window of its own (not a column of first_arrivals): only the buckets count it, and
    the joins of the arrivals need not wait for it."""
    earlier = (Window.partitionBy(*STREAM)
               .orderBy("arrival", "publish_time")
               .rowsBetween(Window.unboundedPreceding, -1))
    seen = F.max("publish_time").over(earlier)
    return arrivals.withColumn(
        "out_of_order", (seen.isNotNull() & (F.col("publish_time") < seen)).cast("int"))


def stream_start(messages: DataFrame) -> DataFrame:
    """(topo, t0): the first publish time of the stream per topology (bucket origin)."""
    return messages.groupBy("topo").agg(F.min("publish_time").alias("t0"))


def _bucketed(df: DataFrame, t0: DataFrame, bucket_us: int) -> DataFrame:
    return (df.join(F.broadcast(t0), "topo")
            .withColumn("bucket", F.floor((F.col("publish_time") - F.col("t0"))
                                          / F.lit(bucket_us)).cast("int"))
            .drop("t0"))


def delivery_outcomes(expected: DataFrame, arrivals: DataFrame) -> DataFrame:
    """Expected deliveries with their outcome: received (0/1), arrival, delay_us
    (arrival - publish_time; null when not received)."""
    got = arrivals.select(*MESSAGE, "member", "arrival")
    return (expected.join(got, [*MESSAGE, "member"], "left")
            .withColumn("received", F.col("arrival").isNotNull().cast("int"))
            .withColumn("delay_us", F.col("arrival") - F.col("publish_time")))


def churn_delivery(outcomes: DataFrame, arrivals: DataFrame, messages: DataFrame,
                   dead: DataFrame, bucket_us: int) -> DataFrame:
    """Delivery ratio over time: one row per (topo, variant, bucket of publish time).
    `arrivals`: the surviving members' first arrivals with their out_of_order flags.

    Schema: topo int, variant string, bucket int, bucket_start_us bigint,
    bucket_end_us bigint, messages bigint (published), expected bigint, received bigint,
    ratio double (received / expected), duplicates bigint (copies beyond the first, all
    members), out_of_order bigint, mean_delay_us double, max_delay_us bigint (received
    ones), dead_nodes bigint (nodes dead at the bucket start).
    """
    keys = ["topo", "variant", "bucket"]
    # the three inputs' rows in one frame (a column stays null in the rows of the others),
    # so that a single aggregate gives every column of a bucket
    rows = (messages.select("topo", "variant", "publish_time", F.lit(1).alias("message"))
            .unionByName(outcomes.select("topo", "variant", "publish_time",
                                         F.lit(1).alias("expected"), "received", "delay_us"),
                         allowMissingColumns=True)
            .unionByName(arrivals.select("topo", "variant", "publish_time",
                                         (F.col("copies") - 1).alias("duplicate"),
                                         "out_of_order"),
                         allowMissingColumns=True))
    t0 = stream_start(messages)
    per_bucket = (_bucketed(rows, t0, bucket_us).groupBy(*keys)
                  .agg(F.count("message").alias("messages"),
                       F.count("expected").alias("expected"),
                       F.sum("received").alias("received"),
                       F.avg("delay_us").alias("mean_delay_us"),
                       F.max("delay_us").alias("max_delay_us"),
                       F.sum("duplicate").alias("duplicates"),
                       F.sum("out_of_order").cast("bigint").alias("out_of_order"))
                  .join(F.broadcast(t0), "topo")
                  .withColumn("bucket_start_us",
                              F.col("t0") + F.col("bucket") * F.lit(bucket_us))
                  .drop("t0"))
    # per variant (the same count in each): grouped by the keys the buckets are partitioned
    # by, it needs no shuffle
    dead_now = (per_bucket.select(*keys, "bucket_start_us").join(F.broadcast(dead), "topo")
                .where((F.col("dead_from") <= F.col("bucket_start_us"))
                       & (F.col("dead_until").isNull()
                          | (F.col("bucket_start_us") < F.col("dead_until"))))
                .groupBy(*keys).agg(F.countDistinct("node").alias("dead_nodes")))
    return (per_bucket.join(dead_now, keys, "left")
            .fillna(0, ["received", "duplicates", "out_of_order", "dead_nodes"])
            .withColumn("bucket_end_us", F.col("bucket_start_us") + F.lit(bucket_us))
            .withColumn("ratio", F.col("received") / F.col("expected"))
            .select("topo", "variant", "bucket", "bucket_start_us", "bucket_end_us",
                    "messages", "expected", "received", "ratio", "duplicates", "out_of_order",
                    "mean_delay_us", "max_delay_us", "dead_nodes"))


def churn_outages(outcomes: DataFrame) -> DataFrame:
    """Member outages: maximal runs of consecutive expected messages (in publish order,
    per variant, group and member) the member never received.

    recovered_us is the publish time of the next message it did receive (null: none until
    the end of the stream); duration_us = recovered_us - start_us is the tree repair time
    as the member saw it, at the resolution of the multicast interval.
    Schema: topo int, variant string, group int, member int, start_us bigint,
    last_missed_us bigint, missed bigint, recovered_us bigint, duration_us bigint.
    """
    member = ["topo", "variant", "group", "member"]
    order = Window.partitionBy(*member).orderBy("publish_time", "source")
    later = order.rowsBetween(1, Window.unboundedFollowing)
    # gaps and islands: the number of hits so far is constant within a run of misses and
    # differs between runs, so (member, hits) names each outage
    rows = (outcomes
            .withColumn("hits", F.sum("received").over(
                order.rowsBetween(Window.unboundedPreceding, 0)))
            .withColumn("next_received", F.min(F.when(F.col("received") == 1,
                                                      F.col("publish_time"))).over(later))
            .where(F.col("received") == 0))
    return (rows.groupBy(*member, "hits")
            .agg(F.min("publish_time").alias("start_us"),
                 F.max("publish_time").alias("last_missed_us"),
                 F.count("*").alias("missed"),
                 F.min("next_received").alias("recovered_us"))
            .withColumn("duration_us", F.col("recovered_us") - F.col("start_us"))
            .select(*member, "start_us", "last_missed_us", "missed", "recovered_us",
                    "duration_us"))


def churn_rp_failover(messages: DataFrame, arrivals: DataFrame, groups: DataFrame,
                      failures: DataFrame) -> DataFrame:
    """Per group whose RP (group.rp, the node that took the CREATE) failed during the stream
    (`failures`: first_failures): how long until a message published after the failure
    reached a member again.

    The take-over itself is not logged (Scribe counts it in `scribe_rp_takeovers`); the
    fail-over time is measured from the RP's first failure to the first arrival, at any
    member, of a message published after it (the arrival time, not the publish
    time, so that messages published after the failure that the source had to re-send
    count by when they got through).
    Schema: topo int, variant string, group int, rp int, failed_us bigint,
    messages_after bigint, delivered_after bigint (published after the failure and
    received by at least one member), first_delivered_us bigint (that first arrival),
    failover_us bigint (null: no later message was delivered).
    """
    rp = groups.groupBy("topo", "group").agg(F.min("rp").alias("rp"))
    first_fail = failures.withColumnRenamed("member", "rp")
    span = messages.groupBy("topo", "variant", "group").agg(
        F.min("publish_time").alias("first_us"), F.max("publish_time").alias("last_us"))
    failed = (span.join(rp, ["topo", "group"]).join(first_fail, ["topo", "rp"])
              .where((F.col("failed_us") >= F.col("first_us"))
                     & (F.col("failed_us") <= F.col("last_us"))))
    delivered = arrivals.groupBy(*MESSAGE).agg(F.min("arrival").alias("first_arrival"))
    after = (messages.join(failed.select("topo", "variant", "group", "failed_us"),
                           ["topo", "variant", "group"])
             .where(F.col("publish_time") > F.col("failed_us"))
             .join(delivered, MESSAGE, "left"))
    stats = after.groupBy("topo", "variant", "group").agg(
        F.count("*").alias("messages_after"),
        F.count("first_arrival").alias("delivered_after"),
        F.min("first_arrival").alias("first_delivered_us"))
    return (failed.join(stats, ["topo", "variant", "group"], "left")
            .fillna(0, ["messages_after", "delivered_after"])
            .withColumn("failover_us", F.col("first_delivered_us") - F.col("failed_us"))
            .select("topo", "variant", "group", "rp", "failed_us", "messages_after",
                    "delivered_after", "first_delivered_us", "failover_us"))


def delivery_summary(outcomes: DataFrame, buckets: DataFrame, died: DataFrame) -> DataFrame:
    """Per (topo, variant): messages, expected, received, ratio, min_bucket_ratio,
    duplicates, out_of_order, delay mean/p99/max of received expected deliveries (surviving
    members), then the members counted apart: surviving_members, died_members,
    died_expected, died_received (`died` = outcomes of died_deliveries).

    The counts and the largest delay are the buckets' (`churn_delivery`: every expected
    delivery and surviving member's arrival is in the bucket of its message), the mean
    and p99 delays and the members need the deliveries themselves."""
    keys = ["topo", "variant"]
    dead = died.groupBy(*keys).agg(
        F.countDistinct("group", "member").alias("died_members"),
        F.count("*").alias("died_expected"), F.sum("received").alias("died_received"))
    got = outcomes.groupBy(*keys).agg(
        F.countDistinct("group", "member").alias("surviving_members"),
        F.avg("delay_us").alias("mean_delay_us"),
        F.percentile("delay_us", 0.99).alias("p99_delay_us"))
    per_bucket = buckets.groupBy(*keys).agg(
        F.sum("messages").alias("messages"), F.min("ratio").alias("min_bucket_ratio"),
        F.sum("expected").alias("expected"), F.sum("received").alias("received"),
        F.max("max_delay_us").cast("double").alias("max_delay_us"),
        F.sum("duplicates").alias("duplicates"), F.sum("out_of_order").alias("out_of_order"))
    return (per_bucket.join(got, keys, "left").join(dead, keys, "left")
            .fillna(0, ["surviving_members", "died_members", "died_expected",
                        "died_received"])
            .withColumn("ratio", F.col("received") / F.col("expected"))
            .select(*keys, "messages", "expected", "received", "ratio", "min_bucket_ratio",
                    "duplicates", "out_of_order", "mean_delay_us", "p99_delay_us",
                    "max_delay_us", "surviving_members", "died_members", "died_expected",
                    "died_received"))


def outage_summary(outages: DataFrame) -> DataFrame:
    """Per (topo, variant): outages, outages_recovered, duration mean/median/max (recovered)."""
    return outages.groupBy("topo", "variant").agg(
        F.count("*").alias("outages"), F.count("duration_us").alias("outages_recovered"),
        F.avg("duration_us").alias("outage_mean_us"),
        F.percentile("duration_us", 0.5).alias("outage_median_us"),
        F.max("duration_us").cast("double").alias("outage_max_us"))


def failover_summary(failovers: DataFrame) -> DataFrame:
    """Per (topo, variant): rp_failures, rp_failovers (a later message got through),
    failover mean/max."""
    return failovers.groupBy("topo", "variant").agg(
        F.count("*").alias("rp_failures"), F.count("failover_us").alias("rp_failovers"),
        F.avg("failover_us").alias("failover_mean_us"),
        F.max("failover_us").cast("double").alias("failover_max_us"))


SUMMARY_COLUMNS = ["messages", "expected", "received", "ratio", "min_bucket_ratio",
                   "duplicates", "out_of_order", "mean_delay_us", "p99_delay_us",
                   "max_delay_us", "outages", "outages_recovered", "outage_mean_us",
                   "outage_median_us", "outage_max_us", "rp_failures", "rp_failovers",
                   "failover_mean_us", "failover_max_us", "surviving_members",
                   "died_members", "died_expected", "died_received"]


def churn_summary(delivery: DataFrame, outages: DataFrame, failovers: DataFrame) -> DataFrame:
    """One row per (topo, variant): the three summaries side by side (counts of outages /
    fail-overs are 0 when there were none). The driver adds the mean row over topologies
    (`analysis.stats.with_topology_mean`) and `publishes_from`.

    Schema: topo int, variant string, then SUMMARY_COLUMNS (double).
    """
    keys = ["topo", "variant"]
    joined = (delivery.join(outage_summary(outages), keys, "left")
              .join(failover_summary(failovers), keys, "left")
              .fillna(0, ["outages", "outages_recovered", "rp_failures", "rp_failovers"]))
    return joined.select(*keys, *[F.col(c).cast("double").alias(c) for c in SUMMARY_COLUMNS])
