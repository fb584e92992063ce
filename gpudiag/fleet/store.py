"""Where a fleet dataset lives (fleet/dataset.py): a local folder, given as a path or a
file:// URL, or a folder on any filesystem fsspec knows by URL (s3://, gs://, az://,
memory://, ...; each protocol needs fsspec's package for it, s3fs for S3).

A local folder is read by Polars' lazy scan (partition and column pruning) and written
to a temporary name then renamed. Object storage has no folders and no rename: a file is
written whole in one request (an object appears whole or not at all, so a reader never
sees half of one), and read through fsspec, file by file, with the partitions taken from
its path as Polars takes them from a local one."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_PARTITION = re.compile(r"^(date|model)=(.*)$")


class StoreError(OSError):
    """A dataset URL that cannot be used here (unknown protocol, a package missing)."""


def is_url(target: str) -> bool:
    """Whether `target` is a URL (scheme://...) rather than a local path."""
    return bool(_URL.match(target))


class Store:
    """A dataset's root folder: local (`fs` None, `root` a path) or on an fsspec
    filesystem (`root` the path within it)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.fs: Any = None
        self.root = target
        if is_url(target):
            try:
                import fsspec
                from fsspec.implementations.local import LocalFileSystem

                fs, root = fsspec.core.url_to_fs(target)
            except ImportError as exc:  # fsspec's own words: "Install s3fs to access S3"
                raise StoreError(f"{target}: {str(exc).splitlines()[0]}") from None
            except ValueError as exc:  # "Protocol not known: ..."
                raise StoreError(f"{target}: {str(exc).splitlines()[0]}") from None
            if isinstance(fs, LocalFileSystem):
                self.root = root  # a file:// URL is a local folder
            else:
                self.fs, self.root = fs, root.rstrip("/")

    @property
    def local(self) -> bool:
        return self.fs is None

    def join(self, *parts: str) -> str:
        if self.local:
            return str(Path(self.root, *parts))
        return "/".join([self.root, *parts])

    def is_file(self, path: str) -> bool:
        return Path(path).is_file() if self.local else bool(self.fs.isfile(path))

    def is_dir(self, path: str) -> bool:
        return Path(path).is_dir() if self.local else bool(self.fs.isdir(path))

    def exists(self, path: str) -> bool:
        return Path(path).exists() if self.local else bool(self.fs.exists(path))

    def has_entries(self, path: str) -> bool:
        """A folder with anything in it."""
        if self.local:
            return any(Path(path).iterdir())
        return bool(self.fs.ls(path, detail=False))

    def read_text(self, path: str) -> str:
        if self.local:
            return Path(path).read_text()
        return bytes(self.fs.cat_file(path)).decode()

    def makedirs(self, path: str) -> None:
        if self.local:
            Path(path).mkdir(parents=True, exist_ok=True)
        else:
            self.fs.makedirs(path, exist_ok=True)  # nothing to make on object storage

    def write(self, path: str, frame: Any = None, text: str | None = None) -> None:
        """A Parquet file of `frame` (statistics kept), or `text`: locally to a temporary
        name then renamed; elsewhere whole, in one request."""
        if self.local:
            from gpudiag.atomic import atomic_target

            with atomic_target(path, suffix=".tmp") as temporary:
                if frame is not None:
                    frame.write_parquet(temporary, statistics=True)
                else:
                    Path(temporary).write_text(text or "")
            return
        if frame is not None:
            buffer = io.BytesIO()
            frame.write_parquet(buffer, statistics=True)
            data = buffer.getvalue()
        else:
            data = (text or "").encode()
        self.fs.pipe_file(path, data)

    def files(self, table: str) -> list[str]:
        """Every Parquet file of a table, in path order."""
        folder = self.join(table)
        if self.local:
            return sorted(str(p) for p in Path(folder).rglob("*.parquet"))
        if not self.fs.isdir(folder):
            return []
        return sorted(p for p in self.fs.find(folder) if p.endswith(".parquet"))

    def scan_file(self, path: str) -> Any:
        """One Parquet file of a table (its columns only: no partitions)."""
        import polars as pl

        return pl.scan_parquet(path if self.local else self.fs.open(path, "rb"))

    def scan(self, table: str) -> Any:
        """The Polars lazy frame of one table, with its partitions (date, model) as
        columns: locally Polars' hive scan; elsewhere each file through fsspec."""
        import polars as pl

        if self.local:
            pattern = str(Path(self.root, table, "**", "*.parquet"))
            return pl.scan_parquet(pattern, hive_partitioning=True, schema=None)
        frames = []
        for path in self.files(table):
            found = dict(m.groups() for part in path.split("/") if (m := _PARTITION.match(part)))
            frame = pl.scan_parquet(self.fs.open(path, "rb"))
            frames.append(
                frame.with_columns(
                    pl.lit(found.get("date")).str.to_date().alias("date"),
                    pl.lit(unquote(found.get("model", ""))).alias("model"),
                )
            )
        if not frames:
            raise StoreError(f"{self.target}: no {table} files")
        return pl.concat(frames, how="vertical")
