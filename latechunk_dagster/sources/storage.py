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
from urllib.parse import quote, unquote, urlsplit

import pyarrow.fs as pafs

from latechunk_dagster.core.redact import redact_url
from latechunk_dagster.sources.documents import RejectedRow, printable
from latechunk_dagster.sources.retries import first_line, retried

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


@dataclass(frozen=True)
class StoreURI:
    """An object-store URI taken apart (:func:`split_store_uri`).

    Attributes:
        scheme: lower case (``s3``); userinfo: ``user:secret`` as written (``None``: none; never shown);
        bucket: the bucket (container) name; key: the prefix below it, percent-decoded, without its
        leading or trailing ``/`` (``my docs``).
    """

    scheme: str
    userinfo: str | None
    bucket: str
    key: str

    @property
    def public(self) -> str:
        """``scheme://bucket/key``: the URI as every message and :attr:`DocumentStore.uri` show it."""
        return f"{self.scheme}://{self.bucket}/{self.key}".rstrip("/")


def split_store_uri(uri: str) -> StoreURI:
    """An object-store URI's scheme, credentials, bucket and key, as written by hand.

    * **Credentials** (``s3://KEY_ID:SECRET@bucket/prefix``): everything before the ``@`` that
      follows a ``:`` in the first segment; a secret may hold ``/``, ``+`` or a space (about half of
      AWS secret keys hold a ``/``, which no URI parser reads as userinfo). Percent-encoded
      credentials are decoded by pyarrow.
    * **The key** is percent-decoded, as pyarrow's ``from_uri`` and LanceDB (object_store) decode
      it: ``s3://docs/my%20docs`` and ``s3://docs/my docs`` are the prefix ``my docs``; a key that
      holds a ``%`` itself is written ``%25``.
    * A query string (``?region=...``) is not part of the key and is never shown.
    """
    scheme, _, rest = uri.partition("://")
    userinfo = None
    head = rest.split("/", 1)[0]
    if ":" in head and "@" in rest[len(head.split(":", 1)[0]) :]:
        userinfo, _, rest = rest.partition("@")  # AWS and Azure keys hold no "@"
    elif "@" in head:
        userinfo, _, rest = rest.partition("@")
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    bucket, _, key = rest.partition("/")
    return StoreURI(scheme.lower(), userinfo, bucket, unquote(key).strip("/"))


def public_uri(uri: str) -> str:
    """``uri`` without credentials: no ``user:secret@`` (a secret with ``/`` or a space included) and
    no query (``?access_key=...``); anything that is not an object-store URI as given."""
    if urlsplit(uri).scheme.lower() not in SCHEMES or "://" not in uri:
        return uri
    return split_store_uri(uri).public


#: What a message about a URI that carries credentials adds: how to give them instead.
CREDENTIALS_HINT = (
    "credentials in a store URI must be percent-encoded (a '/' in a secret as %2F, a space as %20), "
    "or better given as storage_options (aws_access_key_id, aws_secret_access_key) or the AWS_* variables"
)


def location(path: str | PurePath, storage_options: Mapping[str, str] | None = None) -> PurePath:
    """Where a store is: a resolved local ``Path``, or an :class:`ObjectPath` bound to its filesystem.

    Args:
        path: a local path, or an ``s3://``, ``gs://``, ``az://`` / ``abfs://`` URI
            (:func:`split_store_uri`: how credentials and the key are read; the key is
            percent-decoded, so ``s3://docs/my%20docs`` and ``s3://docs/my docs`` are one prefix,
            through the standard chain and with ``storage_options`` alike). Credentials in the URI
            are taken by pyarrow's ``from_uri`` and never kept in the path or shown.
        storage_options: LanceDB's form (:data:`OPTION_KEYS`); empty: each cloud's standard chain.

    Raises:
        ValueError: ``storage_options`` on a local path, a key not in :data:`OPTION_KEYS`, or a key
            of another cloud than the URI's (naming the key; never its value); a URI pyarrow cannot
            parse (shown without credentials, with :data:`CREDENTIALS_HINT` when it has some); a
            key with an empty, ``.`` or ``..`` segment (``s3://b/data//x.jsonl``: it would read ``data/x.jsonl``).
        OSError: pyarrow cannot make the filesystem (e.g. it cannot resolve a bucket's region;
            shown without credentials).
    """
    if isinstance(path, ObjectPath):
        return path
    if not is_object_uri(path):
        if storage_options:
            where = f"not the local path {path}"
            raise ValueError(f"storage_options are for object-store URIs (s3://, gs://, az://), {where}")
        return Path(path).expanduser().resolve()
    parts = split_store_uri(str(path))
    if parts.key and any(segment in ("", ".", "..") for segment in parts.key.split("/")):
        raise ValueError(
            f"{parts.public}: the key has an empty ('//'), '.' or '..' segment, which a path reads as "
            "another key; name the prefix or object without it"
        )
    try:
        fs = filesystem(parts, storage_options or {})
    except (OSError, ValueError) as exc:  # pyarrow's errors quote the URI it was given: credentials out
        hint = f" ({CREDENTIALS_HINT})" if parts.userinfo else ""
        shown = redact_url(first_line(exc))
        raise (OSError if isinstance(exc, OSError) else ValueError)(f"{parts.public}: {shown}{hint}") from None
    cls = type(f"{parts.scheme.upper()}Path", (ObjectPath,), {"scheme": parts.scheme, "filesystem": fs})
    return cls("/" + parts.bucket + ("/" + parts.key if parts.key else ""))


def filesystem(uri: StoreURI, storage_options: Mapping[str, str]) -> pafs.FileSystem:
    """The ``pyarrow.fs`` filesystem of an object-store URI (:func:`location`: arguments and errors)."""
    family = SCHEMES[uri.scheme]
    kwargs: dict[str, Any] = {}
    for key, value in storage_options.items():
        known = OPTION_KEYS.get(key.lower())
        if known is None:
            raise ValueError(f"storage_options: unknown key {key!r} (known: {sorted(OPTION_KEYS)})")
        if known[0] != family:
            raise ValueError(f"storage_options: {key!r} is a {known[0]} setting; {uri.public} is {family}")
        kwargs[known[1]] = value
    if not kwargs:  # the standard chain; S3: also the bucket's region. Only the bucket: the key is ours
        userinfo = "" if uri.userinfo is None else quote(unquote(uri.userinfo), safe=":") + "@"
        return pafs.FileSystem.from_uri(f"{uri.scheme}://{userinfo}{uri.bucket}")[0]
    if family == "s3":
        return pafs.S3FileSystem(**_s3_arguments(kwargs))
    if family == "azure":
        kwargs.setdefault("account_name", uri.userinfo or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", ""))
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


def list_files(
    root: ObjectPath,
) -> tuple[list[ObjectPath], dict[PurePath, ObjectStat], list[RejectedRow], list[tuple[ObjectPath, RejectedRow]]]:
    """Every object under ``root`` whose path holds no hidden part (``.name``), sorted, with what the
    listing says of each, from one recursive listing (paginated by the store; no object is read).

    Returns:
        ``(files, stats, gaps, skipped)``: a listing that fails at any page (an error, throttling
        past the retries, a listing cut short, an unreachable endpoint) lists no file and is one gap
        (reason ``unlistable``), so nothing can be read as removed. ``skipped``: each key with an
        empty (``a//b``), ``.`` or ``..`` segment below ``root``, named exactly as listed (reason
        ``bad_key``): a path would read it as another key (``a/b``), so it is not read, and its
        shard is held (never read as removed).
    """
    fs = root.filesystem
    assert fs is not None
    try:
        infos = fs.get_file_info(pafs.FileSelector(root.key, recursive=True, allow_not_found=True))
    except OSError as exc:
        where = printable(str(root))
        return [], {}, [RejectedRow("*", where, "unlistable", f"{where}: cannot be listed: {first_line(exc)}")], []
    files: list[ObjectPath] = []
    stats: dict[PurePath, ObjectStat] = {}
    skipped: list[tuple[ObjectPath, RejectedRow]] = []
    below = len(root.key) + 1
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        path = type(root)("/" + info.path)
        segments = info.path[below:].split("/")
        if any(seg.startswith(".") and seg not in (".", "..") for seg in segments):
            continue  # hidden
        if any(seg in ("", ".", "..") for seg in segments):
            skipped.append((path, _bad_key_row(root, info.path)))
            continue
        files.append(path)
        stats[path] = ObjectStat(info.size, info.mtime_ns)
    return sorted(files, key=str), stats, [], skipped


def _bad_key_row(root: ObjectPath, key: str) -> RejectedRow:
    where = printable(f"{root.scheme}://{key}")
    detail = (
        f"{where}: the key has an empty ('//'), '.' or '..' segment, which a path reads as another key; "
        "not read (rename the object)"
    )
    return RejectedRow("*", where, "bad_key", detail)


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


class ChangedWhileReadError(OSError):
    """A file replaced (or removed) while it was read: its bytes may mix two versions, so none of
    its rows can be trusted (an ``OSError``: readers make it an ``unreadable_file`` row, and the
    partition keeps its old rows until a run reads one version: ``INCOMPLETE_READS``)."""


def version_of(file: PurePath) -> tuple[object, ...]:
    """What names one version of ``file``: an object's ETag, VersionId (where the bucket versions),
    size and modification time from one HEAD request (pyarrow's input-file metadata; no download);
    a local file's (size, mtime in ns, inode, ctime in ns). Two reads of one version give equal tuples.

    Raises:
        OSError: the file cannot be reached (``FileNotFoundError``: it is gone).
    """
    if isinstance(file, ObjectPath):
        assert file.filesystem is not None
        with file.filesystem.open_input_file(file.key) as handle:
            return _object_version(handle.metadata())
    st = os.stat(file)
    return ("local", st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def _object_version(metadata: Mapping[Any, Any]) -> tuple[object, ...]:
    """The version of an object from pyarrow's metadata of an opened object (its HEAD response)."""
    values = {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in dict(metadata).items()}
    return ("object", *(values.get(k) for k in ("ETag", "VersionId", "Content-Length", "Last-Modified")))


class PinnedReader(io.BufferedReader):
    """A buffered reader of one version of a file (:func:`open_input`): leaving its ``with`` block
    without an error checks that the file is still the version it was when opened, and raises
    :class:`ChangedWhileReadError` if not. pyarrow reads an object in ranged GETs of
    :data:`READ_BUFFER_BYTES` without ``If-Match``, so an object replaced between two of them
    would hand on the start of one version and the end of another; the check after the last byte
    (one HEAD) finds any replacement made while the file was read (a replacement with the very same
    bytes keeps its ETag and reads the same)."""

    file: PurePath
    version: tuple[object, ...]

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.close()
        if exc_type is None:
            self.check_unchanged()

    def check_unchanged(self) -> None:
        """Raises :class:`ChangedWhileReadError` when the file is no longer the version opened (or is gone)."""
        where = printable(str(self.file))
        try:
            now = retried(lambda: version_of(self.file), self.file)
        except FileNotFoundError:
            raise ChangedWhileReadError(f"{where}: removed while it was read") from None
        if now != self.version:
            raise ChangedWhileReadError(
                f"{where}: replaced while it was read (version {_shown(self.version)} when opened, "
                f"{_shown(now)} after the last byte), so what was read may mix two versions; not used"
            )


def _shown(version: tuple[object, ...]) -> str:
    return "/".join(str(v) for v in version[1:] if v is not None)


def open_input(file: PurePath, *, random_access: bool = False) -> PinnedReader:
    """A buffered binary reader of one version of ``file`` (local or in an object store) through
    ``pyarrow.fs``: reads ahead :data:`READ_BUFFER_BYTES` per request, so memory is one buffer
    whatever the file's size. ``random_access``: seekable (Parquet footers, indexed JSONL lines).
    Used as a context manager, it checks on a clean exit that the file was not replaced while it
    was read (:class:`PinnedReader`: one HEAD more per object).

    Raises:
        OSError: the file cannot be opened. ChangedWhileReadError (an ``OSError``): leaving the
            ``with`` block, the file is not the version opened.
    """
    if isinstance(file, ObjectPath):
        fs, name, before = file.filesystem, file.key, None
    else:
        fs, name, before = _LOCAL, str(file), version_of(file)  # before opening: a change after is seen
    assert fs is not None
    raw = fs.open_input_file(name) if random_access else fs.open_input_stream(name)
    reader = PinnedReader(raw, READ_BUFFER_BYTES)  # type: ignore[arg-type]  # a NativeFile is a raw reader
    reader.file = file
    reader.version = _object_version(raw.metadata()) if before is None else before
    return reader


def read_bytes(file: PurePath) -> bytes:
    """All bytes of one version of ``file`` (one document), read once through :func:`open_input`.

    Raises:
        OSError: the file cannot be read. ChangedWhileReadError: it was replaced while it was read.
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
