"""Text in UTF-16 or UTF-32 where UTF-8 is expected: found by its byte order mark or its NUL pattern.

Every text this package reads is UTF-8. A UTF-16 file of ASCII or Latin text is *valid* UTF-8 byte
for byte (``"Hi"`` in UTF-16LE is ``48 00 69 00``): read as UTF-8 it becomes text with a NUL
between every character, which full-text and hybrid search never match, and no other check
notices. With a byte order mark it is not valid UTF-8, and the bytes ``FF FE`` look like Latin-1.
:func:`foreign_encoding` tells both apart from UTF-8 by the first :data:`SAMPLE_BYTES` bytes:

* a byte order mark: ``FF FE 00 00`` / ``00 00 FE FF`` (UTF-32LE/BE), ``FF FE`` / ``FE FF``
  (UTF-16LE/BE), tested in that order (a UTF-32LE mark starts with the UTF-16LE one);
* without one, the NUL pattern: at least a third of the bytes are NUL, and in UTF-16LE text of
  Latin script the second byte of most 2-byte units is NUL and the first rarely is (mirrored in
  UTF-16BE; in UTF-32 the three high bytes of a 4-byte unit). Text that is really UTF-8 holds no
  NUL unless its writer put one there (a stray NUL, as in ``"ab\\x00cd"``, is not the pattern);
* UTF-16 of CJK text, which has no NUL pattern: read as UTF-16 it is mostly CJK characters, read
  as UTF-8 it holds control characters (:func:`_utf16_cjk` gives the exact rule); without it such a
  file was refused with the hint for a Latin-1 file.

One home for the rule: the store readers (:mod:`latechunk_dagster.sources.readers`: text files,
JSONL files, JSONL/Parquet/upstream ``text`` values), the query file reader and
:func:`latechunk_dagster.core.tokenization.check_text` all ask :func:`foreign_encoding`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes of a file (or UTF-8 bytes of a text's start) that :func:`foreign_encoding` looks at.
SAMPLE_BYTES = 4096

#: Byte order marks, longest first (``FF FE 00 00`` is UTF-32LE, not UTF-16LE and a NUL).
_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "UTF-32LE"),
    (b"\x00\x00\xfe\xff", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16LE"),
    (b"\xfe\xff", "UTF-16BE"),
)


@dataclass(frozen=True)
class ForeignEncoding:
    """What :func:`foreign_encoding` found.

    Attributes:
        name: ``"UTF-16LE"``, ``"UTF-16BE"``, ``"UTF-32LE"`` or ``"UTF-32BE"`` (a name both Python's
            codecs and ``iconv`` know).
        evidence: why, e.g. ``"byte order mark FF FE"`` or ``"no byte order mark; a NUL after
            most characters"``.
    """

    name: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.name} ({self.evidence})"

    def file_detail(self, where: str) -> str:
        """The one-line reason a file is refused: ``"<where>: the file is UTF-16LE (...), not UTF-8; ..."``."""
        return f"{where}: the file is {self}, not UTF-8; convert it to UTF-8 (e.g. iconv -f {self.name} -t UTF-8)"

    def text_detail(self) -> str:
        """Why a text value is refused (no place named: callers prefix it)."""
        return (
            f"it is {self} text that was read as UTF-8 (a NUL or a stray byte between its characters); "
            f"decode the source as {self.name}"
        )


def foreign_encoding(data: bytes | str) -> ForeignEncoding | None:
    """The UTF-16 / UTF-32 encoding ``data`` is really in, or ``None`` (it may be UTF-8).

    ``data``: a file's bytes (only the first :data:`SAMPLE_BYTES` are looked at), or a ``str``
    read from such bytes as UTF-8 (its start is encoded back to those bytes: lone surrogates of
    ``surrogateescape`` become the bytes they stand for).
    """
    head = _head_bytes(data)
    for bom, name in _BOMS:
        if head.startswith(bom):
            return ForeignEncoding(name, "byte order mark " + bom.hex(" ").upper())
    if head.count(0) * 3 < len(head):  # UTF-16 of Latin text is half NUL bytes, UTF-32 three quarters
        return _utf16_cjk(head)
    return _nul_pattern(head) or _utf16_cjk(head)


def _nul_pattern(head: bytes) -> ForeignEncoding | None:
    """UTF-16 / UTF-32 of Latin text: the NUL bytes of each code unit (module docstring)."""
    for width in (4, 2):
        units = len(head) // width
        if units == 0:
            continue
        nuls = [head[lane : units * width : width].count(0) for lane in range(width)]
        for name, low in ((f"UTF-{8 * width}LE", 0), (f"UTF-{8 * width}BE", width - 1)):
            # the byte that carries a Latin character (low) is rarely NUL; the other byte(s) mostly are
            padding = min(nuls[lane] for lane in range(width) if lane != low)
            if padding * 2 >= units and nuls[low] * 4 <= padding:
                side = "after" if low == 0 else "before"
                return ForeignEncoding(name, f"no byte order mark; NUL bytes {side} most characters")
    return None


#: Code points of CJK text: Hangul Jamo, CJK radicals to the unified ideographs (punctuation, kana,
#: extension A included), Hangul syllables, compatibility ideographs, half- and fullwidth forms.
_CJK_RANGES = ((0x1100, 0x11FF), (0x2E80, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF))
#: Bytes that are control characters when read as UTF-8 (C0 but tab, newline, carriage return; DEL).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
#: The fewest 2-byte units :func:`_utf16_cjk` decides on.
CJK_MIN_UNITS = 16


def _utf16_cjk(head: bytes) -> ForeignEncoding | None:
    """UTF-16 of CJK text without a byte order mark: valid UTF-16 whose code points are mostly CJK,
    and whose bytes, read as UTF-8, hold control characters. Each of the three conditions alone
    misleads: ASCII pairs with a lowercase second letter are CJK code points when read as UTF-16
    (``"ab"`` is U+6261), so Latin-1 text reads as "mostly CJK"; a stray NUL is a control character.
    Together, on :data:`CJK_MIN_UNITS` units or more:

    * read as UTF-16 (LE and BE tried), at least a quarter of the code points are CJK
      (:data:`_CJK_RANGES`) and 90% are CJK or ASCII text (random bytes: about 63%, the CJK share
      of all 16-bit values);
    * the low byte of those units is spread over all 256 values, as a CJK character's is: at least
      a quarter of them lie outside printable ASCII (text in Latin-1, Greek, or ASCII has its
      letters there);
    * at least 1% of the bytes are control characters in UTF-8 (:data:`_CONTROL_BYTES`; about 6%
      in UTF-16 CJK text, none in text of a single-byte or legacy CJK encoding: GBK, Shift-JIS and
      EUC-KR use no bytes below 0x40 in their characters).
    """
    head = head[: len(head) // 2 * 2]
    units = len(head) // 2
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))  # in C: one pass, no per-byte Python
    if units < CJK_MIN_UNITS or controls * 100 < len(head):
        return None
    for name, low in (("UTF-16LE", 0), ("UTF-16BE", 1)):
        text = head.decode(name.lower(), errors="replace")
        cjk = sum(any(lo <= ord(c) <= hi for lo, hi in _CJK_RANGES) for c in text)
        ascii_text = sum(c in "\t\n\r" or " " <= c <= "~" for c in text)
        spread = sum(not 0x20 <= b <= 0x7E for b in head[low::2])
        if cjk * 4 >= len(text) and (cjk + ascii_text) * 10 >= 9 * len(text) and spread * 4 >= units:
            share = 100 * cjk // len(text)
            evidence = f"no byte order mark; as UTF-16 {share}% CJK characters, as UTF-8 control characters"
            return ForeignEncoding(name, evidence)
    return None


def _head_bytes(data: bytes | str) -> bytes:
    if isinstance(data, bytes):
        return data[:SAMPLE_BYTES]
    text = data[:SAMPLE_BYTES]
    try:
        return text.encode("utf-8", "surrogateescape")  # the bytes a surrogateescape decode came from
    except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte (a JSON "\ud800")
        return text.encode("utf-8", "surrogatepass")
