"""The text of an HTML page's bytes, by the WHATWG encoding rules, never by a statistical guess.

A page in cp1252 / Latin-1 that declares no charset was read by BeautifulSoup's detection
(charset-normalizer), which picked a Central-European code page: ``crème`` became ``crčme``, stored
and searchable as wrong text with nothing to say so. Browsers do not guess there; HTML's parsing
rules (WHATWG HTML 13.2.3 "Determining the character encoding", Encoding standard 4.2 labels):

1. a byte order mark (UTF-8, UTF-16LE, UTF-16BE) wins;
2. else a declared encoding: ``<meta charset=...>`` or ``<meta http-equiv="Content-Type"
   content="...; charset=...">`` in the first 1024 bytes (the prescan) or later in the ``<head>``
   (where a browser changes to it while parsing), or an XML declaration's
   ``encoding=`` (XHTML), its label mapped as the Encoding standard maps it (``latin1``,
   ``iso-8859-1`` and ``ascii`` are windows-1252; a UTF-16 label in a page without a BOM is UTF-8);
3. else UTF-8 when the bytes are valid UTF-8 (the Encoding standard's default for new formats and
   what a browser's autodetection reports for such bytes);
4. else windows-1252, the fallback of the locales that write Latin script (HTML's "suggested
   default encoding" table), its five undefined bytes read as the C1 controls WHATWG maps them to.

Bytes a declared encoding cannot decode become U+FFFD (as a browser shows them): visible, never
silently different letters. A label Python does not know is ignored (as an unknown label is).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

#: The bytes the ``<meta>`` prescan reads (WHATWG HTML 13.2.3.2: the first 1024).
PRESCAN_BYTES = 1024

#: How far a ``<meta>`` charset is looked for past the prescan, up to the end of the ``<head>``
#: (WHATWG HTML 13.2.6.4.4: a ``<meta>`` met while parsing the head changes the encoding).
HEAD_BYTES = 64 << 10

_HEAD_END = re.compile(rb"</head\s*>|<body[\s>]", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_META = re.compile(rb"<meta\b[^>]*?\bcharset\s*=\s*[\"']?\s*([A-Za-z0-9_.:\-]+)", re.IGNORECASE)
_XML_DECL = re.compile(rb"^<\?xml[^>]*?\bencoding\s*=\s*[\"']([A-Za-z0-9_.:\-]+)[\"']")

#: Labels the Encoding standard maps elsewhere than Python's codec of the same name.
_WHATWG_LABELS = {
    "latin1": "cp1252",
    "iso8859_1": "cp1252",
    "ascii": "cp1252",
    "cp819": "cp1252",
    "iso8859_9": "cp1254",
    "latin5": "cp1254",
    "utf_16": "utf-8",  # a UTF-16 label without a BOM: the page is read as UTF-8 (HTML 13.2.3.2)
    "utf_16_le": "utf-8",
    "utf_16_be": "utf-8",
    "utf_32": "utf-8",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "tis_620": "cp874",
    "iso8859_11": "cp874",
}

#: windows-1252 as WHATWG reads it: Python's cp1252, its 5 undefined bytes (81 8D 8F 90 9D) the C1
#: controls of the same code point.
_CP1252 = "".join(bytes([b]).decode("cp1252", errors="ignore") or chr(b) for b in range(256))


@dataclass(frozen=True)
class DecodedPage:
    """An HTML page's text and how its encoding was found.

    Attributes:
        text: the page as ``str``.
        encoding: the Python codec it was read with (``"utf-8"``, ``"cp1252"``, ...).
        source: ``"bom"``, ``"declared"`` (meta or XML declaration), ``"utf-8"`` (undeclared, valid
            UTF-8) or ``"fallback"`` (undeclared, not UTF-8: windows-1252).
    """

    text: str
    encoding: str
    source: str


def decode_html(data: bytes) -> DecodedPage:
    """The text of an HTML page's bytes by the WHATWG rules (module docstring); never raises."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return DecodedPage(data[len(bom) :].decode(encoding, errors="replace"), encoding, "bom")
    declared = declared_encoding(data)
    if declared is not None:
        return DecodedPage(_decode(data, declared), declared, "declared")
    try:
        return DecodedPage(data.decode("utf-8"), "utf-8", "utf-8")
    except UnicodeDecodeError:
        return DecodedPage(_decode(data, "cp1252"), "cp1252", "fallback")


def declared_encoding(data: bytes) -> str | None:
    """The Python codec of the encoding an HTML page declares in its first :data:`PRESCAN_BYTES`, or
    later in its ``<head>`` (within :data:`HEAD_BYTES`) (``<meta charset>``, ``<meta http-equiv
    content="...charset=...">``, an XML declaration), mapped
    as the Encoding standard maps labels; ``None`` when none is declared or the label is unknown."""
    head = data[:PRESCAN_BYTES]
    found = _XML_DECL.match(head.lstrip()) or _META.search(head)
    if found is None:  # a <meta> later in the <head> (after a long comment): browsers change to it
        end = _HEAD_END.search(data, 0, HEAD_BYTES)
        found = _META.search(data, 0, end.start() if end else HEAD_BYTES)
    if found is None:
        return None
    label = found.group(1).decode("ascii", errors="replace").strip().lower()
    try:
        name = codecs.lookup(label).name.replace("-", "_")
    except LookupError:
        return None
    return codecs.lookup(_WHATWG_LABELS.get(name, name)).name


def _decode(data: bytes, encoding: str) -> str:
    if encoding in ("cp1252", "windows-1252"):
        return data.decode("latin-1").translate(_LATIN1_TO_CP1252)
    return data.decode(encoding, errors="replace")


_LATIN1_TO_CP1252 = {i: c for i, c in enumerate(_CP1252) if chr(i) != c}
