"""Document files read into Markdown text: PDF, DOCX, PPTX and HTML, one module per format.

One entry point, :func:`convert`: ``convert(name, data, limits)`` returns a
:class:`~latechunk_dagster.sources.converters.base.Converted` (the text, the converter's name and
version, PDF pages / PPTX slides) or raises a
:class:`~latechunk_dagster.sources.converters.base.Rejection` whose ``reason`` is ``encrypted``,
``no_text_layer``, ``unreadable_file`` or ``too_large``. The converted text is the document's
text: the rows' char ranges index it (docs/contract.md).

Which files are converted: :data:`CONVERTED_SUFFIXES` (by the file name's last suffix, any case).
The libraries and why each was chosen: each module's docstring and bench/README.md.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from latechunk_dagster.sources.converters.base import REASONS, ConversionLimits, Converted, Rejection

__all__ = ["CONVERTED_SUFFIXES", "REASONS", "ConversionLimits", "Converted", "Rejection", "convert", "is_converted"]

#: Suffix -> format of the files :func:`convert` reads.
CONVERTED_SUFFIXES = {".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".html": "html", ".htm": "html"}


def is_converted(name: str) -> bool:
    """Whether a file of this name is read by :func:`convert` (``.pdf``, ``.docx``, ``.pptx``, ``.html``, ``.htm``)."""
    return PurePosixPath(name).suffix.lower() in CONVERTED_SUFFIXES


def convert(name: str, data: bytes, limits: ConversionLimits | None = None) -> Converted:
    """The Markdown text of one document file.

    Args:
        name: the file's name or path (its suffix picks the format: :data:`CONVERTED_SUFFIXES`).
        data: the file's bytes, whole.
        limits: size and decompression limits (default :meth:`ConversionLimits.from_env`).

    Raises:
        Rejection: the file is refused (``reason`` in :data:`REASONS`, ``detail`` says why).
        ValueError: ``name`` has no suffix of :data:`CONVERTED_SUFFIXES`.
        ImportError: the format's library is not installed (the ``documents`` extra).
    """
    limits = ConversionLimits.from_env() if limits is None else limits
    fmt = CONVERTED_SUFFIXES.get(PurePosixPath(name).suffix.lower())
    if fmt is None:
        raise ValueError(f"{name}: not a converted format (suffixes: {sorted(CONVERTED_SUFFIXES)})")
    limits.check_size(len(data))
    try:
        return _convert(fmt, data, limits)
    except ImportError as exc:
        raise ImportError(
            f"{name}: reading {fmt.upper()} files needs the 'documents' extra "
            f"(pip install 'latechunk-dagster[documents]'): {exc}"
        ) from exc


def _convert(fmt: str, data: bytes, limits: ConversionLimits) -> Converted:
    if fmt == "pdf":
        from latechunk_dagster.sources.converters.pdf import convert_pdf

        return convert_pdf(data)
    if fmt == "docx":
        from latechunk_dagster.sources.converters.docx import convert_docx

        return convert_docx(data, limits)
    if fmt == "pptx":
        from latechunk_dagster.sources.converters.pptx import convert_pptx

        return convert_pptx(data, limits)
    from latechunk_dagster.sources.converters.html import convert_html

    return convert_html(data)
