"""Credentials out of every description of a URL: the one home of the rule.

A server URL may carry a password (``http://user:pass@host``, basic auth in front of a server)
or a key in its query string (``?api_key=...``). Wherever a URL is described (log lines, errors,
``describe()``, rows of ``rejected_documents``) it goes through :func:`redact_url`, which masks
them as httpx's own ``URL.__repr__`` masks a password (``http://user:[secure]@host``). The
credentials themselves travel only as request auth (:func:`split_userinfo`), never inside a URL
that httpx would write to its own request log line (``HTTP Request: POST http://...`` at INFO).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, unquote, urlsplit

#: What a masked credential reads as (httpx's own mask).
MASK = "[secure]"

#: ``scheme://userinfo@`` and ``?key=value`` / ``&key=value`` of a URL inside any text.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s'\"]*)@")
#: An object-store URI's ``user:secret@`` whose secret holds a ``/`` or a space (about half of AWS
#: secret keys hold a ``/``; no URI parser reads it as userinfo, and pyarrow's "Cannot parse URI"
#: quotes it whole): the user part holds no ``/`` or space, the secret runs to the first ``@``.
_STORE_USERINFO = re.compile(
    r"(?P<scheme>\b(?:s3a?|gs|gcs|az|abfss?)://)(?P<userinfo>[^/@\s'\"]*:[^@'\"\n]*)@", re.IGNORECASE
)
_QUERY_VALUE = re.compile(r"(?P<key>[?&][^=&#\s'\"]+=)(?P<value>[^&#\s'\"]*)")


def _mask_userinfo(userinfo: str) -> str:
    """``user:[secure]`` when a password is given; ``[secure]`` for a user name alone (a token as
    user name, ``http://TOKEN@host``, is a credential too)."""
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}" if colon else MASK


def redact_url(text: str) -> str:
    """A URL, or any text quoting URLs (httpx's errors, a list of URLs in a setting), with the
    userinfo and every query value of each URL masked (:data:`MASK`); everything else as given.

    ``http://user:pass@host:8000/v1?api_key=abc`` -> ``http://user:[secure]@host:8000/v1?api_key=[secure]``
    (a user name alone, ``http://TOKEN@host``, is masked whole: ``http://[secure]@host``). An
    object-store URI's secret may hold ``/`` or spaces: ``s3://AKIA:ab/c d@bucket/p`` ->
    ``s3://AKIA:[secure]@bucket/p``.
    """
    text = _STORE_USERINFO.sub(lambda m: f"{m['scheme']}{_mask_userinfo(m['userinfo'])}@", text)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{_mask_userinfo(m['userinfo'])}@" if m["userinfo"] else m[0], text)
    return _QUERY_VALUE.sub(lambda m: f"{m['key']}{MASK}", text) if "?" in text else text


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its userinfo, and the ``(user, password)`` it held (percent-decoded; ``None``
    without userinfo), for a client that sends them as basic auth: the URL httpx logs then holds none.

    Raises:
        ValueError: the URL has a query string or a fragment: a server's root URL takes neither
            (httpx would append every request path to the query); the message is redacted.
    """
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(
            f"{redact_url(url)}: a server's root URL takes no query string or fragment (give a key as api_key)"
        )
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    bare = SplitResult(parts.scheme, hostport, parts.path, "", "").geturl()
    return bare, (unquote(user), unquote(password))
