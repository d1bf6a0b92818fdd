"""Grouping keys placed on shuffle partitions in turn, not by a hash of their values.

A grouped map (`groupBy(keys).applyInPandas`, or a cogroup) shuffles its rows by a hash of
the grouping columns. The analysis' grouped maps have few keys, all known on the driver (a
topology's traffics, its group buckets), and hashing a handful of keys onto a handful of
partitions often puts several on one partition and none on another: all four link-stress
keys of `small_groups_30k` went to one of its two partitions, and one core did the section
while the other waited. `placed` adds an int column `slot` whose value, chosen per key,
makes Spark's hash of (slot, *keys) send the i-th known key to partition i mod n; grouping
by (slot, *keys) then groups exactly as the keys alone (a key's rows all get one slot), in
the one shuffle Spark makes anyway. Results never depend on the placement, only the
balance.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

SLOT = "slot"
_SPARK_HASH_SEED = 42   # HashPartitioning is pmod(Murmur3Hash(exprs, 42), n)
_M32 = 0xFFFFFFFF


def spark_int_hash(value: int, seed: int = _SPARK_HASH_SEED) -> int:
    """Spark's Murmur3 hash of one int column (`Murmur3_x86_32.hashInt`), as a signed
    32-bit int: what `F.hash(int column)` and a shuffle by that column compute. O(1)."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _M32

    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = rotl(k1, 15) * 0x1B873593 & _M32
    h1 = rotl((seed & _M32) ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def spark_partition(values: Sequence[int], partitions: int) -> int:
    """The shuffle partition Spark gives a row whose int grouping columns hold `values`
    (HashPartitioning: the hashes chained column by column, then pmod n)."""
    h = _SPARK_HASH_SEED
    for v in values:
        h = spark_int_hash(v, h)
    return h % partitions          # Python's % of a signed int is Spark's pmod here


def slot_for(key: Sequence[int], target: int, partitions: int) -> int:
    """The least slot >= 0 that sends (slot, *key) to partition `target`. O(partitions)
    hashes on average (the hash mod n is close to uniform)."""
    slot = 0
    while spark_partition((slot, *key), partitions) != target:
        slot += 1
    return slot


# Above this many cells the slot table is not built and Spark's own hash places the keys
# (each cell is a literal the driver sends through Py4J when it builds the plan).
MAX_TABLE = 1 << 12


def placed(df: DataFrame, keys: Sequence[str], values: Sequence[Sequence[int]],
           partitions: int) -> DataFrame:
    """`df` plus an int column `slot` such that grouping by (slot, *keys) puts the rows
    whose `keys` equal values[i] on shuffle partition i mod `partitions` (the session's
    spark.sql.shuffle.partitions; any other row gets slot 0). The keys must be int
    columns. O(1) per row: the slot is looked up in a table indexed by the keys' offsets
    from their least values (a CASE over the keys makes Spark's generated code too large
    for the JIT, which then interprets it, much slower on a large run)."""
    types = dict(df.dtypes)
    wrong = [k for k in keys if types.get(k) != "int"]
    if wrong:
        raise ValueError(f"placed: key columns {wrong} are not int columns ({types})")
    n = max(1, int(partitions))
    if not values:
        return df.withColumn(SLOT, F.lit(0))
    lows = [min(int(v[j]) for v in values) for j in range(len(keys))]
    spans = [max(int(v[j]) for v in values) - lows[j] + 1 for j in range(len(keys))]
    cells = 1
    for span in spans:
        cells *= span
    if cells > MAX_TABLE:
        return df.withColumn(SLOT, F.lit(0))
    table = [0] * cells
    index: Column = F.lit(0)
    for column, low, span in zip(keys, lows, spans, strict=True):
        index = index * F.lit(span) + (F.col(column) - F.lit(low))
    for i, value in enumerate(values):
        cell = 0
        for v, low, span in zip(value, lows, spans, strict=True):
            cell = cell * span + int(v) - low
        table[cell] = slot_for([int(v) for v in value], i % n, n)
    lookup = F.array(*[F.lit(x) for x in table])
    inside = None
    for column, low, span in zip(keys, lows, spans, strict=True):
        ok = F.col(column).between(low, low + span - 1)
        inside = ok if inside is None else inside & ok
    slot = F.when(inside, F.element_at(lookup, index.cast("int") + 1)).otherwise(F.lit(0))
    return df.withColumn(SLOT, slot.cast("int"))
