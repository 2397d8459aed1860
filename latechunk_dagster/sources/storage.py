"""Where a store's files are: a local disk or an object store (S3, GCS, Azure), through one layer, ``pyarrow.fs``.

Every file of every store is opened here (:func:`open_input`, :func:`read_bytes`): a local path through
``pyarrow.fs.LocalFileSystem``, ``s3://``, ``gs://`` and ``az://`` / ``abfs://`` URIs through pyarrow's
``S3FileSystem``, ``GcsFileSystem`` and ``AzureFileSystem``. Why ``pyarrow.fs``: it is already a
dependency (Parquet reads go through it anyway), its clients take each cloud's standard credential
chain (the ``AWS_*`` variables including ``AWS_ENDPOINT_URL``, instance roles and profiles; Google's
application default credentials; Azure's ``DefaultAzureCredential``), it lists a prefix with the
size and modification time of each object (what a fingerprint needs, no download), and a listing
that fails part-way raises instead of returning what it saw. fsspec would add s3fs/gcsfs/adlfs and
aiobotocore; obstore would add a second Rust object-store client beside LanceDB's. pyarrow's
listing does not return ETags, so a fingerprint is the object's key, size and modification time.

A location in an object store is an :class:`ObjectPath`: a ``PurePosixPath`` of ``/bucket/key``
whose ``str()`` is its URI (``s3://bucket/key``), so the layout rules (shard = first directory, doc_id
= path below the root) and every message work on it as on a local ``Path``. Its class carries the
store's filesystem; credentials never enter its ``str()``, the store's ``uri`` or any message
(:func:`public_uri`).

``storage_options`` take LanceDB's form (the ``object_store`` keys ``lancedb.connect`` takes, e.g.
``aws_access_key_id``, ``aws_endpoint``, ``allow_http``), so one dict serves the table and the store;
:data:`OPTION_KEYS` lists each key and what it sets. A key that is not known is refused by name.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from latechunk_dagster.sources.documents import RejectedRow, printable

#: URI schemes read as object stores, and the family of each (the filesystem class that reads it).
SCHEMES: dict[str, str] = {
    **dict.fromkeys(("s3", "s3a"), "s3"),
    **dict.fromkeys(("gs", "gcs"), "gcs"),
    **dict.fromkeys(("az", "abfs", "abfss"), "azure"),
}

#: Bytes read ahead per request when a file is read through (one GET per MiB of an object).
READ_BUFFER_BYTES = 1 << 20

#: LanceDB's ``storage_options`` keys (object_store's names and aliases) -> (family, pyarrow argument).
OPTION_KEYS: dict[str, tuple[str, str]] = {
    **{k: ("s3", "access_key") for k in ("aws_access_key_id", "access_key_id")},
    **{k: ("s3", "secret_key") for k in ("aws_secret_access_key", "secret_access_key")},
    **{k: ("s3", "session_token") for k in ("aws_session_token", "session_token", "aws_token", "token")},
    **{k: ("s3", "region") for k in ("aws_region", "region", "aws_default_region")},
    **{k: ("s3", "endpoint_override") for k in ("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url")},
    **{k: ("s3", "allow_http") for k in ("allow_http", "aws_allow_http")},
    **{k: ("s3", "request_timeout") for k in ("timeout",)},  # object_store's form: "30s", "500ms", "2m"
    **{k: ("s3", "connect_timeout") for k in ("connect_timeout",)},
    **{k: ("azure", "account_name") for k in ("azure_storage_account_name", "account_name")},
    **{k: ("azure", "account_key") for k in ("azure_storage_account_key", "account_key", "access_key")},
    **{k: ("azure", "sas_token") for k in ("azure_storage_sas_token", "sas_token", "sas_key")},
    **{k: ("azure", "client_id") for k in ("azure_client_id", "client_id")},
    **{k: ("azure", "client_secret") for k in ("azure_client_secret", "client_secret")},
    **{k: ("azure", "tenant_id") for k in ("azure_tenant_id", "tenant_id")},
    **{k: ("gcs", "target_service_account") for k in ("google_target_service_account",)},
    **{k: ("gcs", "endpoint_override") for k in ("google_endpoint",)},
}


class ObjectPath(PurePosixPath):
    """A place in an object store: ``/bucket/key`` as a pure POSIX path, written as its URI.

    Made per store by :func:`location` (the class carries ``scheme`` and ``filesystem``); paths derived
    from one (``parent``, ``/``, ``relative_to``) keep them. A relative one prints as a plain path."""

    scheme = "s3"
    filesystem: pafs.FileSystem | None = None

    def __str__(self) -> str:
        plain = super().__str__()
        return f"{self.scheme}://{plain[1:]}" if self.is_absolute() else plain

    @property
    def key(self) -> str:
        """The path as ``pyarrow.fs`` names it: ``bucket/key`` (no scheme, no leading slash)."""
        return super().__str__().lstrip("/")


def is_object_uri(path: str | PurePath) -> bool:
    """True for ``s3://``, ``gs://``, ``az://`` / ``abfs://`` URIs (:data:`SCHEMES`) and their :class:`ObjectPath`."""
    if isinstance(path, ObjectPath):
        return True
    return isinstance(path, str) and urlsplit(path).scheme.lower() in SCHEMES and "://" in path


def public_uri(uri: str) -> str:
    """``uri`` without credentials: no ``user:secret@`` and no query (``?access_key=...``)."""
    parts = urlsplit(uri)
    if parts.scheme.lower() not in SCHEMES:
        return uri
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{parts.path}".rstrip("/")


def location(path: str | PurePath, storage_options: Mapping[str, str] | None = None) -> PurePath:
    """Where a store is: a resolved local ``Path``, or an :class:`ObjectPath` bound to its filesystem.

    Args:
        path: a local path, or an ``s3://``, ``gs://``, ``az://`` / ``abfs://`` URI (credentials in
            the URI are taken by pyarrow's ``from_uri`` and never kept in the path).
        storage_options: LanceDB's form (:data:`OPTION_KEYS`); empty: each cloud's standard chain.

    Raises:
        ValueError: ``storage_options`` on a local path, a key not in :data:`OPTION_KEYS`, or a key
            of another cloud than the URI's (naming the key; never its value).
        OSError: pyarrow cannot make the filesystem (e.g. it cannot resolve a bucket's region).
    """
    if isinstance(path, ObjectPath):
        return path
    if not is_object_uri(path):
        if storage_options:
            where = f"not the local path {path}"
            raise ValueError(f"storage_options are for object-store URIs (s3://, gs://, az://), {where}")
        return Path(path).expanduser().resolve()
    uri = str(path)
    parts = urlsplit(uri)
    fs = filesystem(uri, storage_options or {})
    cls = type(f"{parts.scheme.upper()}Path", (ObjectPath,), {"scheme": parts.scheme.lower(), "filesystem": fs})
    return cls("/" + (parts.hostname or "") + parts.path.rstrip("/"))


def filesystem(uri: str, storage_options: Mapping[str, str]) -> pafs.FileSystem:
    """The ``pyarrow.fs`` filesystem of an object-store URI (:func:`location`: arguments and errors)."""
    family = SCHEMES[urlsplit(uri).scheme.lower()]
    kwargs: dict[str, Any] = {}
    for key, value in storage_options.items():
        known = OPTION_KEYS.get(key.lower())
        if known is None:
            raise ValueError(f"storage_options: unknown key {key!r} (known: {sorted(OPTION_KEYS)})")
        if known[0] != family:
            raise ValueError(f"storage_options: {key!r} is a {known[0]} setting; {public_uri(uri)} is {family}")
        kwargs[known[1]] = value
    if not kwargs:
        return pafs.FileSystem.from_uri(uri)[0]  # the standard chain; S3: also the bucket's region
    if family == "s3":
        return pafs.S3FileSystem(**_s3_arguments(kwargs))
    if family == "azure":
        kwargs.setdefault("account_name", urlsplit(uri).username or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", ""))
        return pafs.AzureFileSystem(**kwargs)
    return pafs.GcsFileSystem(**kwargs)


def _s3_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    for name in ("request_timeout", "connect_timeout"):
        if name in kwargs:
            kwargs[name] = seconds(kwargs[name])
    allow_http = str(kwargs.pop("allow_http", os.environ.get("AWS_ALLOW_HTTP", "false"))).lower() == "true"
    endpoint = kwargs.get("endpoint_override")
    if endpoint and "://" in endpoint:
        parts = urlsplit(endpoint)
        kwargs["endpoint_override"] = parts.netloc
        kwargs["scheme"] = parts.scheme
    elif allow_http:
        kwargs["scheme"] = "http"
    if kwargs.get("scheme") == "http" and not allow_http:
        raise ValueError("storage_options: an http:// endpoint needs allow_http 'true' (as LanceDB asks)")
    return kwargs


def seconds(value: str) -> float:
    """A duration in object_store's form (``"30s"``, ``"500ms"``, ``"2m"``, or plain seconds) in seconds.

    Raises:
        ValueError: not a duration (naming the value: durations are not secret)."""
    text = str(value).strip().lower()
    for suffix, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * scale
    if text.replace(".", "", 1).isdigit():
        return float(text)
    raise ValueError(f"storage_options: {value!r} is not a duration (e.g. '30s', '500ms')")


@dataclass(frozen=True)
class ObjectStat:
    """What a listing returns for a file: its size in bytes and modification time in ns since the epoch."""

    size: int | None
    mtime_ns: int | None


def list_files(root: ObjectPath) -> tuple[list[ObjectPath], dict[PurePath, ObjectStat], list[RejectedRow]]:
    """Every object under ``root`` whose path holds no hidden part (``.name``), sorted, with what the
    listing says of each, from one recursive listing (paginated by the store; no object is read).

    Returns:
        ``(files, stats, gaps)``: a listing that fails at any page (an error, throttling past the
        retries, a listing cut short, an unreachable endpoint) lists no file and is one gap
        (reason ``unlistable``), so nothing can be read as removed.
    """
    fs = root.filesystem
    assert fs is not None
    try:
        infos = fs.get_file_info(pafs.FileSelector(root.key, recursive=True, allow_not_found=True))
    except OSError as exc:
        where = printable(str(root))
        return [], {}, [RejectedRow("*", where, "unlistable", f"{where}: cannot be listed: {first_line(exc)}")]
    files: list[ObjectPath] = []
    stats: dict[PurePath, ObjectStat] = {}
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        path = type(root)("/" + info.path)
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        files.append(path)
        stats[path] = ObjectStat(info.size, info.mtime_ns)
    return sorted(files, key=str), stats, []


def first_line(exc: BaseException) -> str:
    """An error's message, first line (pyarrow's AWS errors carry the request's details after it)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def kind_of_location(path: PurePath) -> str:
    """``"file"``, ``"directory"`` or ``"missing"``: what is at a store's location.

    Raises:
        OSError: the object store cannot be reached or refuses (pyarrow's error).
    """
    if not isinstance(path, ObjectPath):
        return "directory" if Path(path).is_dir() else ("file" if Path(path).exists() else "missing")
    fs = path.filesystem
    assert fs is not None
    info = fs.get_file_info(path.key)
    return {pafs.FileType.File: "file", pafs.FileType.Directory: "directory"}.get(info.type, "missing")


def open_input(file: PurePath, *, random_access: bool = False) -> io.BufferedReader:
    """A buffered binary reader of ``file`` (local or in an object store) through ``pyarrow.fs``:
    reads ahead :data:`READ_BUFFER_BYTES` per request, so memory is one buffer whatever the file's
    size. ``random_access``: seekable (Parquet footers, indexed JSONL lines).

    Raises:
        OSError: the file cannot be opened.
    """
    if isinstance(file, ObjectPath):
        fs, name = file.filesystem, file.key
    else:
        fs, name = _LOCAL, str(file)
    assert fs is not None
    raw = fs.open_input_file(name) if random_access else fs.open_input_stream(name)
    return io.BufferedReader(raw, READ_BUFFER_BYTES)  # type: ignore[arg-type]  # a NativeFile is a raw reader


def read_bytes(file: PurePath) -> bytes:
    """All bytes of ``file`` (one document), read once through :func:`open_input`.

    Raises:
        OSError: the file cannot be read.
    """
    with open_input(file) as handle:
        return handle.read()


def stat_of(file: PurePath) -> ObjectStat:
    """Size and modification time of ``file`` (an object's: from a HEAD request, no download).

    Raises:
        OSError: the file cannot be reached.
    """
    if isinstance(file, ObjectPath):
        assert file.filesystem is not None
        info = file.filesystem.get_file_info(file.key)
        return ObjectStat(info.size, info.mtime_ns)
    st = os.stat(file)
    return ObjectStat(st.st_size, st.st_mtime_ns)


_LOCAL = pafs.LocalFileSystem()
