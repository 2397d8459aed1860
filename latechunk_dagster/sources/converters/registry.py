"""Which converter reads which file: :class:`Converters`, a map of file suffixes to
:class:`~latechunk_dagster.sources.converters.base.Converter` objects, and the built-in ones.

The map a store reads with (:func:`default_converters`, then the store's own): the built-ins
(PDF, DOCX, PPTX, HTML), then the converters of the ``latechunk_dagster.converters`` entry point
group (each entry point names a converter class or object with a ``suffixes`` attribute, e.g. in a
user's ``pyproject.toml``: ``[project.entry-points."latechunk_dagster.converters"]
docling = "my_pkg.converters:DoclingPdf"``), then the ``converters=`` a store is given. A later one
replaces an earlier one for the same suffix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any, ClassVar

from latechunk_dagster.sources.converters.base import (
    ConversionLimits,
    Converted,
    Converter,
    Rejection,
    library_version,
)
from latechunk_dagster.sources.converters.sniff import Sniffed, looks_like_html, sniff

#: The entry point group of converters installed by other packages.
ENTRY_POINT_GROUP = "latechunk_dagster.converters"


@dataclass(frozen=True)
class BuiltInConverter:
    """A converter of this package: module ``converters.<name>`` holds its rules' version ``RULES`` and
    ``convert_<name>(data, limits)``; its :attr:`version` is ``"<RULES> <library> <installed version>"``."""

    name: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]]
    library: ClassVar[str]

    def module(self) -> Any:
        """The format's module (imported on first use: its library is the ``documents`` extra's)."""
        return import_module(f"latechunk_dagster.sources.converters.{self.name}")

    @property
    def version(self) -> str:
        return library_version(self.module().RULES, self.library)

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        return getattr(self.module(), f"convert_{self.name}")(data, limits)


@dataclass(frozen=True)
class PdfConverter(BuiltInConverter):
    """PDF files: :func:`~latechunk_dagster.sources.converters.pdf.convert_pdf`.

    Attributes:
        ocr: read each page without a text layer by OCR (:mod:`~latechunk_dagster.sources.converters.ocr`:
            Tesseract); off (the default), a PDF without any text layer is ``no_text_layer``. On, the
            OCR engine and its version are part of :attr:`version` (``"... ocr/1 tesseract 5.3.0 eng"``).
        char_boxes: read every character's box (the default), so a chunk's ``boxes`` cover exactly its
            characters; ``False`` gives each character its line's box (the union of the line's first
            and last characters' boxes: a chunk's boxes are then its whole lines): the same text, about
            2.3x faster to convert (bench/README.md, ``pdf_quality.py``).
    """

    name: ClassVar[str] = "pdf"
    suffixes: ClassVar[tuple[str, ...]] = (".pdf",)
    library: ClassVar[str] = "pypdfium2"
    ocr: bool = False
    char_boxes: bool = True

    @property
    def version(self) -> str:
        if not self.ocr:
            return super().version
        from latechunk_dagster.sources.converters.ocr import ocr_version

        return f"{super().version} {ocr_version()}"

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        return self.module().convert_pdf(data, limits, ocr=self.ocr, char_boxes=self.char_boxes)


@dataclass(frozen=True)
class DocxConverter(BuiltInConverter):
    """DOCX files: :func:`~latechunk_dagster.sources.converters.docx.convert_docx`."""

    name: ClassVar[str] = "docx"
    suffixes: ClassVar[tuple[str, ...]] = (".docx",)
    library: ClassVar[str] = "python-docx"


@dataclass(frozen=True)
class PptxConverter(BuiltInConverter):
    """PPTX files: :func:`~latechunk_dagster.sources.converters.pptx.convert_pptx`."""

    name: ClassVar[str] = "pptx"
    suffixes: ClassVar[tuple[str, ...]] = (".pptx",)
    library: ClassVar[str] = "python-pptx"


@dataclass(frozen=True)
class HtmlConverter(BuiltInConverter):
    """HTML files: :func:`~latechunk_dagster.sources.converters.html.convert_html`."""

    name: ClassVar[str] = "html"
    suffixes: ClassVar[tuple[str, ...]] = (".html", ".htm")
    library: ClassVar[str] = "markdownify"


BUILT_IN: tuple[Any, ...] = (PdfConverter(), DocxConverter(), PptxConverter(), HtmlConverter())

#: The built-in converters' classes: a file one of them would read by its suffix is read by its
#: content where that differs (:meth:`Converters.for_content`).
BUILT_IN_TYPES = (PdfConverter, DocxConverter, PptxConverter, HtmlConverter)

#: Suffix -> format name of the built-in converters.
CONVERTED_SUFFIXES = MappingProxyType({s: c.name for c in BUILT_IN for s in c.suffixes})


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


@dataclass(frozen=True)
class Converters:
    """Suffix (lower case, with its dot: ``".pdf"``) -> converter; picklable when its converters are.

    Build one with :meth:`with_overrides` (or :func:`default_converters`); do not change ``by_suffix`` in place.
    """

    by_suffix: Mapping[str, Converter] = field(default_factory=dict)

    def for_name(self, name: str) -> Converter | None:
        """The converter of a file of this name (by its last suffix, any case), or ``None``."""
        return self.by_suffix.get(_suffix(name))

    @property
    def suffixes(self) -> tuple[str, ...]:
        """Every suffix a converter reads, sorted."""
        return tuple(sorted(self.by_suffix))

    def with_overrides(self, converters: Mapping[str, Converter] | Iterable[Any]) -> Converters:
        """These converters and ``converters`` (a suffix map, or objects with a ``suffixes``
        attribute), the latter winning for a suffix both read.

        Raises:
            TypeError: a converter without ``name``, ``version`` or ``convert``, or (in an
                iterable) without ``suffixes``.
        """
        pairs = converters.items() if isinstance(converters, Mapping) else _by_own_suffixes(converters)
        merged = dict(self.by_suffix)
        for suffix, converter in pairs:
            if not isinstance(converter, Converter):
                need = "it needs name, version and convert()"
                raise TypeError(f"{converter!r} (for {suffix!r}) is not a converter: {need}")
            merged[suffix.lower() if suffix.startswith(".") else "." + suffix.lower()] = converter
        return Converters(merged)

    def reads(self, name: str, data: bytes) -> bool:
        """Whether :meth:`convert` reads this file rather than it being read as text: a converter reads
        its suffix, or its first bytes are a binary format (:func:`~.sniff.sniff`: a PDF named
        ``.txt`` is converted as a PDF, a PNG named ``.md`` is refused as ``wrong_format``)."""
        return self.for_name(name) is not None or sniff(data) is not None

    def for_content(self, name: str, data: bytes) -> Converter | None:
        """The converter that reads this file: by its content where its first bytes say what it is
        (:func:`~.sniff.sniff`) and the converter of its suffix is a built-in one or none (a suffix
        can lie: a PDF saved as ``.html``; an HTML page saved as ``.pdf``, by
        :func:`~.sniff.looks_like_html`); a converter of the user's own for the suffix is trusted
        with any content. ``None``: a text file.

        Raises:
            Rejection: ``encrypted`` (a password-protected Office file), ``wrong_format`` (a format
                no converter reads: an image, an archive, a legacy Office file), naming the format.
        """
        by_name = self.for_name(name)
        found = sniff(data)
        if by_name is not None and not isinstance(by_name, BUILT_IN_TYPES):
            return by_name
        if found is None:
            binary = by_name is not None and by_name.name in ("pdf", "docx", "pptx")
            if binary and looks_like_html(data) and ".html" in self.by_suffix:
                return self.by_suffix[".html"]  # an HTML page saved under a binary format's suffix
            return by_name
        by_content = self.by_suffix.get("." + found.format)
        if by_content is not None:
            return by_content
        if found.format == "damaged_zip" and by_name is not None and by_name.name in ("docx", "pptx"):
            return by_name  # a damaged package: its converter says what is wrong with it
        expected = "text" if by_name is None else f"a {by_name.name.upper()} file"
        if found.format == "encrypted_office":
            raise Rejection("encrypted", f"its content is {found}, not {expected}; remove the password to index it")
        raise Rejection("wrong_format", _wrong_format(found, expected, self.suffixes))

    def lineage(self, name: str) -> str | None:
        """``"<name>/<version>"`` of the converter of this file, or ``None`` (a text file)."""
        converter = self.for_name(name)
        return None if converter is None else f"{converter.name}/{converter.version}"

    def convert(self, name: str, data: bytes, limits: ConversionLimits | None = None) -> Converted:
        """The Markdown text of one document file, its ``converter`` set to the ``"<name>/<version>"``
        of the converter that read it (:meth:`for_content`: by the content where it is a binary
        format, else by the suffix).

        Args:
            name: the file's name or path (its suffix picks the converter, unless its content says otherwise).
            data: the file's bytes, whole.
            limits: size and decompression limits (default :meth:`ConversionLimits.from_env`).

        Raises:
            Rejection: the file is refused (``reason`` in ``REASONS``); any other exception of the
                converter is turned into ``unreadable_file`` naming the converter and the exception
                (the file's fault, never its shard's).
            ValueError: no converter reads ``name``'s suffix and its content is text.
            ImportError: the converter's library is not installed (the ``documents`` extra).
        """
        limits = ConversionLimits.from_env() if limits is None else limits
        limits.check_size(len(data))
        converter = self.for_content(name, data)
        if converter is None:
            raise ValueError(f"{name}: not a converted format (suffixes: {list(self.suffixes)})")
        try:
            converted = converter.convert(name, data, limits)
        except (Rejection, MemoryError):
            raise
        except ImportError as exc:
            raise ImportError(
                f"{name}: reading it with the {converter.name} converter needs its library "
                f"(the 'documents' extra: pip install 'latechunk-dagster[documents]'): {exc}"
            ) from exc
        except Exception as exc:  # any failure of a converter on one file is that file's fault
            detail = f"the {converter.name} converter failed on it ({type(exc).__name__}: {exc})"
            raise Rejection("unreadable_file", detail) from None
        if not isinstance(converted, Converted):
            got = type(converted).__name__
            raise TypeError(f"{name}: the {converter.name} converter returned {got}, not Converted")
        limits.check_text(converted.text)
        return replace(converted, converter=f"{converter.name}/{converter.version}")


def _wrong_format(found: Sniffed, expected: str, suffixes: tuple[str, ...]) -> str:
    return (
        f"its content is {found}, not {expected}; no converter reads that format "
        f"(converted suffixes: {', '.join(suffixes)}): convert it first, or register a converter for it"
    )


def _by_own_suffixes(converters: Iterable[Any]) -> Iterable[tuple[str, Any]]:
    for converter in converters:
        suffixes = getattr(converter, "suffixes", None)
        if not suffixes:
            raise TypeError(f"{converter!r} has no suffixes: give converters as a {{suffix: converter}} map")
        for suffix in suffixes:
            yield suffix, converter


def store_converters(
    converters: Converters | Mapping[str, Converter | str] | Iterable[Any] | None = None, *, ocr: bool = False
) -> Converters:
    """The converters a store reads with: :func:`default_converters`, with ``ocr`` the built-in PDF
    converter reading scanned pages (:class:`PdfConverter` ``(ocr=True)``), then ``converters`` (a
    :class:`Converters`, a ``{suffix: converter}`` map, or converters with ``suffixes``) winning for
    the suffixes they read. In a map, a converter may be given by its import path
    (``"my_pkg.converters:Epub"``: :func:`load_converter`), as orchestrators' settings give it.

    Raises:
        TypeError: as :meth:`Converters.with_overrides`.
        ValueError, ImportError: an import path that does not load (:func:`load_converter`); a
            converter for a table suffix (``.jsonl``, ``.parquet``).
        ValueError: ``ocr`` while ``.pdf`` is read by a converter other than the built-in one (an
            entry point's or ``converters``'): OCR is a setting of the built-in PDF converter.
        RuntimeError: ``ocr`` without Tesseract installed
            (:func:`~latechunk_dagster.sources.converters.ocr.tesseract_version`).
    """
    out = default_converters()
    if ocr:
        out = out.with_overrides({".pdf": PdfConverter(ocr=True)})
    if isinstance(converters, Converters):
        out = out.with_overrides(converters.by_suffix)
    elif isinstance(converters, Mapping):
        out = out.with_overrides({s: load_converter(c) if isinstance(c, str) else c for s, c in converters.items()})
    elif converters is not None:
        out = out.with_overrides(converters)
    from latechunk_dagster.sources.layout import TABLE_SUFFIXES  # layout imports this package

    tables = sorted(set(out.suffixes) & set(TABLE_SUFFIXES))
    if tables:
        why = "those are table files (JSONL, Parquet), read as rows, not converted"
        raise ValueError(f"a converter for {tables}: {why}")
    pdf = out.for_name("x.pdf")
    if ocr and not (isinstance(pdf, PdfConverter) and pdf.ocr):
        raise ValueError(
            f"ocr=True is a setting of the built-in PDF converter, but .pdf files are read by {pdf!r}: "
            "leave ocr off and let that converter read scanned pages, or drop it for .pdf"
        )
    if ocr:
        from latechunk_dagster.sources.converters.ocr import ocr_version

        ocr_version()  # a machine without Tesseract fails here, once, not file by file
    return out


def load_converter(path: str) -> Any:
    """The converter named by ``"module:attribute"`` (an entry point's form): the attribute, or an
    instance of it when it is a class (made with no arguments).

    Raises:
        ValueError: not of the form ``module:attribute``. ImportError: the module does not import.
        AttributeError: the module has no such attribute.
    """
    module, colon, attribute = path.partition(":")
    if not colon or not module.strip() or not attribute.strip():
        raise ValueError(f"converter {path!r}: expected an import path 'module:attribute' (my_pkg.converters:Epub)")
    return _instance(EntryPoint(name="", value=path.strip(), group=ENTRY_POINT_GROUP).load())


def _instance(loaded: Any) -> Any:
    """A loaded converter: an instance of a class (made with no arguments), any other object as it is."""
    return loaded() if isinstance(loaded, type) else loaded


@cache
def default_converters() -> Converters:
    """The built-in converters, then those of the ``latechunk_dagster.converters`` entry point
    group (each loaded object, or an instance of a loaded class, with a ``suffixes`` attribute).

    Raises:
        TypeError: an entry point's object is not a converter.
    """
    converters = Converters().with_overrides(BUILT_IN)
    plugins = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        plugins.append(_instance(point.load()))
    return converters.with_overrides(plugins) if plugins else converters
