"""Where shards (and the driver) keep a run's event logs and checkpoints.

A `Storage` is a root named by a local path, a shared mount, or any URI pyarrow's
filesystems understand (``s3://bucket/prefix``, ``hdfs://host/path``, ``gs://...``). Under
it the layout is the run directory's: ``events/<table>/topo=<t>/<stem>.parquet`` and
``checkpoints/<phase>/shard<k>.pkl``. It pickles as its URI (shards receive it) and opens
its filesystem lazily, in the process that uses it.

``SCRIBE_EMU_NODE_ROOT`` (set in a Ray node's environment, e.g. by a test's
``cluster_utils`` node): a *local* path used in that process is taken under that root, as
if each node had its own disk -- what a cluster without a shared filesystem looks like.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def cache_dir() -> Path:
    """This user's scribe-emu cache (generated topologies, JVM class archives):
    $SCRIBE_EMU_CACHE, default ~/.cache/scribe-emu."""
    return Path(os.environ.get("SCRIBE_EMU_CACHE", Path.home() / ".cache" / "scribe-emu"))

NODE_ROOT_ENV = "SCRIBE_EMU_NODE_ROOT"


def is_uri(location: str) -> bool:
    """True for ``scheme://...`` (other than file://), False for a local path."""
    scheme, sep, _ = str(location).partition("://")
    return bool(sep) and scheme != "file" and len(scheme) > 1


def node_local(path: str) -> str:
    """`path` (absolute) under this node's own root when the node has one (see module doc)."""
    root = os.environ.get(NODE_ROOT_ENV)
    path = os.path.abspath(path)
    return os.path.join(root, path.lstrip(os.sep)) if root else path


class Storage:
    """A root for event logs and checkpoints (see the module docstring)."""

    def __init__(self, location):
        location = str(location)
        if location.startswith("file://"):
            location = location[len("file://"):]
        self.uri = location if is_uri(location) else os.path.abspath(location)
        self._fs = None
        self._root = None

    def __reduce__(self):
        return (Storage, (self.uri,))

    def __repr__(self):
        return f"Storage({self.uri!r})"

    @property
    def is_local(self) -> bool:
        return not is_uri(self.uri)

    def _open(self):
        if self._fs is None:
            if self.is_local:
                self._fs, self._root = pafs.LocalFileSystem(), node_local(self.uri)
            else:
                self._fs, self._root = pafs.FileSystem.from_uri(self.uri)
        return self._fs, self._root

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._open()[0]

    def path(self, *parts: str) -> str:
        """The filesystem path (no scheme) of RELATIVE/PARTS under the root."""
        return posixpath.join(self._open()[1], *[str(p) for p in parts])

    def url(self, *parts: str) -> str:
        """RELATIVE/PARTS as a location Spark can read (s3:// as Hadoop's s3a://)."""
        if self.is_local:
            return self.path(*parts)
        scheme, _, rest = self.uri.partition("://")
        scheme = "s3a" if scheme == "s3" else scheme
        return posixpath.join(f"{scheme}://{rest}", *[str(p) for p in parts])

    # ---- files --------------------------------------------------------------------------
    def exists(self, *parts: str) -> bool:
        return self.filesystem.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def write_bytes(self, data: bytes, *parts: str) -> str:
        """Write a file whole (see :meth:`writer`)."""
        with self.writer(*parts) as f:
            f.write(data)
        return self.path(*parts)

    @contextlib.contextmanager
    def writer(self, *parts: str):
        """A binary file to write RELATIVE/PARTS through, in pieces (a checkpoint is
        pickled straight into it, never held whole in memory): written under a temporary
        name and renamed when the block ends without an error, where the filesystem can,
        so a crash or a full disk leaves no half file under the final name."""
        fs, path = self.filesystem, self.path(*parts)
        tmp = f"{path}.tmp{os.getpid()}"
        if self.is_local:      # plain OS calls: a full disk is an OSError with its errno
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    yield f
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            return
        fs.create_dir(posixpath.dirname(path), recursive=True)
        with fs.open_output_stream(tmp) as f:
            yield f
        fs.move(tmp, path)

    def read_bytes(self, *parts: str) -> bytes:
        with self.filesystem.open_input_stream(self.path(*parts)) as f:
            return f.read()

    @contextlib.contextmanager
    def reader(self, *parts: str):
        """RELATIVE/PARTS as a binary file to read in pieces (a local file, or the
        filesystem's input stream)."""
        if self.is_local:
            with open(self.path(*parts), "rb") as f:
                yield f
            return
        with self.filesystem.open_input_file(self.path(*parts)) as f:
            yield f

    def files(self, *parts: str, suffix: str = "") -> list[str]:
        """Paths of the files under RELATIVE/PARTS (recursively) ending in `suffix`, sorted."""
        sel = pafs.FileSelector(self.path(*parts), recursive=True, allow_not_found=True)
        return sorted(i.path for i in self.filesystem.get_file_info(sel)
                      if i.type == pafs.FileType.File and i.path.endswith(suffix))

    def delete(self, path: str) -> None:
        self.filesystem.delete_file(path)

    # ---- event logs ---------------------------------------------------------------------
    def write_parquet(self, table: pa.Table, name: str, topo: int, stem: str) -> str:
        """events/<name>/topo=<topo>/<stem>.parquet (never overwrites: -1, -2, ... after)."""
        fs = self.filesystem
        d = self.path("events", name, f"topo={int(topo)}")
        fs.create_dir(d, recursive=True)
        path, part = posixpath.join(d, f"{stem}.parquet"), 0
        while fs.get_file_info(path).type != pafs.FileType.NotFound:
            part += 1
            path = posixpath.join(d, f"{stem}-{part}.parquet")
        pq.write_table(table, path, filesystem=fs)
        return path

    def read_events(self, name: str, topo: int) -> pa.Table | None:
        files = self.files("events", name, f"topo={int(topo)}", suffix=".parquet")
        if not files:
            return None
        return pa.concat_tables([pq.read_table(f, filesystem=self.filesystem) for f in files],
                                promote_options="permissive")


def ipc_bytes(table: pa.Table) -> bytes:
    """`table` as one Arrow IPC stream (what RayDP's JVM reader takes from the object store)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1 << 16)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class TableRef:
    """One event table handed off through the object store: `ref` (owned by the driver)
    holds its Arrow IPC stream; `schema`, `rows`, `topo`, `phase` describe it without a
    fetch."""

    __slots__ = ("ref", "schema", "rows", "topo", "phase")

    def __init__(self, ref, schema: pa.Schema, rows: int, topo: int = 0, phase: str = ""):
        self.ref, self.schema, self.rows = ref, schema, int(rows)
        self.topo, self.phase = int(topo), str(phase)

    def __repr__(self):
        return f"TableRef(topo={self.topo}, phase={self.phase!r}, rows={self.rows})"

    def table(self) -> pa.Table:
        """The rows on this process (for small tables: the driver's own reads)."""
        import ray
        return from_ipc(ray.get(self.ref))
