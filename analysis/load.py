"""Event logs -> Spark DataFrames: Parquet read by the executors, Parquet handed over by the
driver, or the hand-off's Arrow object refs read by RayDP's JVM.

Every returned DataFrame has the columns of `analysis.schema.EVENT_TABLES[table]` (cast to
the documented types) plus `topo` (int). A table with no rows (absent directory, no refs) is
an empty DataFrame with that schema, so metric code never special-cases missing logs.

Schemas are declared, not inferred: the driver reads one Parquet footer per table (pyarrow,
no Spark job) and, when its types are the documented ones (the engine's files), Spark reads
with the declared schema; other files (hand-written logs) are read with Spark's inference
and cast. `hand_over=True` (a cluster whose executors do not see the driver's disk): the
driver reads the Parquet itself and sends it to Spark as Arrow batches inside the tasks.

The hand-off (`load_refs`, a cluster without shared storage): shards returned each table as
an Arrow IPC stream into the object store (`emulator.storage.TableRef`); Spark's executors
(RayDP's Ray Java actors) read those objects themselves (`RayDatasetRDD`) and decode the
Arrow batches in the JVM. No byte goes through the driver, no Python runs per row or per
batch, and no Ray Data task is needed (so no CPU beyond the executors' own, and nothing
that waits for a core while Spark holds every one). `run.storage` URIs other than local paths
are read by Spark itself (`s3://` as Hadoop's `s3a://`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.protocol import RunProtocol, pastry_b
from analysis.schema import ARROW_TYPES, EVENT_TABLES, table_ddl


class EventLogError(ValueError):
    """An event log does not follow the documented schema."""


def empty_table(spark: SparkSession, table: str) -> DataFrame:
    """An empty DataFrame with the documented schema of `table` (plus topo). From an RDD
    with no partition: a local list would start Python workers to unpickle nothing (a
    1.2 s stage of small_groups_30k's analysis, which has no `probe` rows)."""
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), table_ddl(table))


def conform(df: DataFrame, table: str) -> DataFrame:
    """Select and cast the documented columns of `table`; raise EventLogError on a missing one.

    O(1) driver work (a projection); `phase` may be absent in hand-made logs and then is null.
    """
    columns = {**EVENT_TABLES[table], "topo": "int"}
    present = set(df.columns)
    missing = [c for c in columns if c not in present and c != "phase"]
    if missing:
        raise EventLogError(f"event table '{table}' lacks column(s) {', '.join(missing)}")
    return df.select([
        (F.col(f"`{c}`") if c in present else F.lit(None)).cast(t).alias(c)
        for c, t in columns.items()
    ])


def _storage(root):
    from emulator.storage import Storage
    return root if isinstance(root, Storage) else Storage(root)


def parquet_files(root, table: str) -> list[str]:
    """ROOT/events/<table>/topo=<t>/*.parquet, sorted (ROOT: a run directory or a storage
    URI)."""
    return [p for p in _storage(root).files("events", table, suffix=".parquet")
            if p.rsplit("/", 2)[-2].startswith("topo=")]


def parquet_rows(root, table: str) -> int:
    """Rows of `table` under ROOT, from the files' footers."""
    store = _storage(root)
    return sum(pq.ParquetFile(p, filesystem=store.filesystem).metadata.num_rows
               for p in parquet_files(store, table))


def logged_topologies(root, table: str) -> set[int]:
    """Topology indices with a topo=<t> directory holding Parquet files for `table`."""
    return {int(p.rsplit("/", 2)[-2].split("=", 1)[1]) for p in parquet_files(root, table)}


def _declared_types_match(sample: str, table: str, filesystem=None) -> bool:
    schema = pq.read_schema(sample, filesystem=filesystem)
    names = set(schema.names)
    for c, t in EVENT_TABLES[table].items():
        if c not in names:
            if c == "phase":
                return False
            raise EventLogError(f"event table '{table}' lacks column(s) {c}")
        if str(schema.field(c).type) != ARROW_TYPES[t]:
            return False
    return True


def load_parquet(spark: SparkSession, root, table: str,
                 hand_over: bool = False) -> DataFrame:
    """ROOT/events/<table>/ (hive partition column `topo`) as a conformed DataFrame."""
    store = _storage(root)
    files = parquet_files(store, table)
    if not files:
        return empty_table(spark, table)
    if hand_over:
        return _handed_over(spark, store, table)
    url = store.url("events", table)
    if _declared_types_match(files[0], table, store.filesystem):
        return spark.read.schema(table_ddl(table)).option("basePath", url).parquet(url)
    df = spark.read.option("basePath", url).parquet(url)
    return conform(df, table)


def _handed_over(spark: SparkSession, store, table: str) -> DataFrame:
    """The driver reads the table (pyarrow) and hands it to Spark as Arrow record batches
    (createDataFrame with Arrow: the data travels inside the tasks, no shared disk)."""
    columns = {**EVENT_TABLES[table], "topo": "int"}
    ds = pads.dataset(store.path("events", table), format="parquet", partitioning="hive",
                      filesystem=store.filesystem)
    present = set(ds.schema.names)
    missing = [c for c in columns if c not in present and c != "phase"]
    if missing:
        raise EventLogError(f"event table '{table}' lacks column(s) {', '.join(missing)}")
    tbl = ds.to_table(columns=[c for c in columns if c in present])
    arrays = {}
    for c, t in columns.items():
        target = pa.type_for_alias(ARROW_TYPES[t])
        arrays[c] = (tbl[c].cast(target) if c in present
                     else pa.nulls(tbl.num_rows, target))
    return spark.createDataFrame(pa.table(arrays).to_pandas(), table_ddl(table))


def load_refs(spark: SparkSession, refs: list, table: str) -> DataFrame:
    """The hand-off: `refs` ([emulator.storage.TableRef], Arrow IPC streams in the object
    store) as a conformed DataFrame, read by the executors' JVMs (see the module doc).

    Refs with different Arrow schemas (a column typed differently by another writer) are
    read per schema, conformed, and unioned.
    """
    refs = [r for r in refs if r.rows]
    if not refs:
        return empty_table(spark, table)
    by_schema: dict = {}
    for r in refs:
        by_schema.setdefault(r.schema.serialize().to_pybytes(), []).append(r)
    frames = [conform(_jvm_dataframe(spark, group), table) for group in by_schema.values()]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def _jvm_dataframe(spark: SparkSession, refs: list) -> DataFrame:
    """RayDP's object-store reader over refs of one Arrow schema (Arrow IPC bytes)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from ray._private.worker import global_worker

    blocks = [r.ref for r in refs]
    # the DataFrame is lazy: its objects must outlive the caller's refs, as long as the
    # Spark session can run it (RayDP's own converter keeps them in a holder actor)
    sc = spark.sparkContext
    if not hasattr(sc, "_scribe_emu_refs"):
        sc._scribe_emu_refs = []
    sc._scribe_emu_refs.extend(blocks)
    schema = from_arrow_schema(refs[0].schema)
    # what raydp.spark.dataset.get_locations computes (without its deprecated ray.worker)
    owners = [global_worker.core_worker.get_owner_address(b) for b in blocks]
    jvm = spark.sparkContext._jvm
    rdd = jvm.org.apache.spark.rdd.RayDatasetRDD(spark._jsc, [b.binary() for b in blocks],
                                                 owners)
    jdf = jvm.org.apache.spark.sql.raydp.ObjectStoreReader.RayDatasetToDataFrame(
        spark._jsparkSession, rdd, schema.json())
    return DataFrame(jdf, spark._wrapped if hasattr(spark, "_wrapped") else spark)


class EventTables(Mapping):
    """{table: DataFrame} of every event table of the schema, each read when first used
    (a run analysed without churn never opens its churn tables; each read costs Spark a
    file listing and a plan, seconds on a loaded machine). Reads happen on the driver's
    thread that first asks, once."""

    def __init__(self, read):
        self._read, self._tables = read, {}
        self._lock = threading.Lock()

    def __getitem__(self, table: str) -> DataFrame:
        if table not in EVENT_TABLES:
            raise KeyError(table)
        with self._lock:   # the sections build their plans from several threads
            if table not in self._tables:
                self._tables[table] = self._read(table)
            return self._tables[table]

    def __iter__(self) -> Iterator[str]:
        return iter(EVENT_TABLES)

    def __len__(self) -> int:
        return len(EVENT_TABLES)


def load_events(spark: SparkSession, run_dir: str | Path | None = None,
                refs: dict[str, list] | None = None,
                hand_over: bool = False) -> EventTables:
    """All event tables, each from `refs[table]` (the hand-off's TableRefs) when given there,
    else from the Parquet logs under `run_dir` (a run directory or a storage URI).

    Returns {table: DataFrame} for every table of the schema (empty ones included), each
    read on first use (`EventTables`).
    """
    if run_dir is None and refs is None:
        raise ValueError("load_events needs a run directory or object refs")
    refs = refs or {}
    unknown = sorted(set(refs) - set(EVENT_TABLES))
    if unknown:
        raise EventLogError(f"unknown event table(s) in refs: {', '.join(unknown)}")

    def read(table: str) -> DataFrame:
        if table in refs:
            return load_refs(spark, refs[table], table)
        if run_dir is not None:
            return load_parquet(spark, run_dir, table, hand_over)
        return empty_table(spark, table)

    return EventTables(read)


def type_table(events_root, refs: dict[str, list] | None) -> dict[int, str]:
    """{code: name} of the run's `message_type` rows (hand-off refs or Parquet; a tiny
    table, read on the driver)."""
    tables: list[pa.Table] = []
    if refs and "message_type" in refs:
        tables = [r.table() for r in refs["message_type"] if r.rows]
        has_messages = bool(refs.get("message"))
    else:
        store = _storage(events_root)
        # one file at a time, its own columns only (`topo` is in the directory name)
        tables = [pq.read_table(p, columns=["type", "name"], filesystem=store.filesystem,
                                partitioning=None)
                  for p in parquet_files(store, "message_type")]
        has_messages = bool(parquet_files(store, "message"))
    if not tables and has_messages:
        # messages whose types have no names: no traffic could be selected by name and
        # every Scribe figure would be silently empty (the emulator writes this table in
        # every run that logs messages)
        raise ValueError(f"{events_root}: the run logs messages but has no message_type "
                         "table (the type codes of its protocols)")
    names: dict[int, str] = {}
    for tbl in tables:
        for code, name in zip(tbl.column("type").to_pylist(), tbl.column("name").to_pylist(),
                              strict=True):
            if code is None or name is None:
                continue
            code = int(code)
            names[code] = min(names[code], name) if code in names else name
    return names


def run_protocol(run_dir: str | Path, events_root, refs: dict[str, list] | None) -> RunProtocol:
    """The protocol facts of a run directory (its type table and config.toml)."""
    return RunProtocol(names=type_table(events_root, refs), pastry_b=pastry_b(run_dir))
