"""Document files read into Markdown text: PDF, DOCX, PPTX and HTML, one module per format, and any
converter of the user's own (:mod:`~latechunk_dagster.sources.converters.registry`).

The interface (:class:`~latechunk_dagster.sources.converters.base.Converter`): an object with a
``name``, a ``version`` and ``convert(name, data, limits) -> Converted``. A
:class:`~latechunk_dagster.sources.converters.registry.Converters` maps file suffixes to converters
(the built-ins, then the ``latechunk_dagster.converters`` entry point group, then the store's own);
:func:`convert` reads one file with the default map. A converter returns a
:class:`~latechunk_dagster.sources.converters.base.Converted` (the text, PDF pages / PPTX slides) or
raises a :class:`~latechunk_dagster.sources.converters.base.Rejection` whose ``reason`` is in
:data:`REASONS`; any other exception it raises is that file's fault too (``unreadable_file``, the
exception named). The converted text is the document's text: the rows' char ranges index it
(docs/contract.md), and ``"<name> <version>"`` is its lineage (the rows' ``converter``, part of
their ``vector_config``).
"""

from __future__ import annotations

from latechunk_dagster.sources.converters.base import REASONS, ConversionLimits, Converted, Converter, Rejection
from latechunk_dagster.sources.converters.registry import CONVERTED_SUFFIXES, Converters, default_converters

__all__ = [
    "CONVERTED_SUFFIXES",
    "REASONS",
    "ConversionLimits",
    "Converted",
    "Converter",
    "Converters",
    "Rejection",
    "convert",
    "default_converters",
    "is_converted",
]


def is_converted(name: str) -> bool:
    """Whether the default converters read a file of this name (by its last suffix, any case)."""
    return default_converters().for_name(name) is not None


def convert(name: str, data: bytes, limits: ConversionLimits | None = None) -> Converted:
    """The Markdown text of one document file, by the default converters
    (:meth:`Converters.convert`, which says what is raised)."""
    return default_converters().convert(name, data, limits)
