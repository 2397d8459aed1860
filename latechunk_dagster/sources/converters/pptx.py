"""PPTX: each slide's title as a heading, its text frames and tables below (python-pptx).

python-pptx is the one maintained reader of PPTX in Python (markitdown uses it too).

Text: slides in order, separated by a blank line; a slide's title placeholder becomes a level-2
heading (``##``), every other shape's paragraphs (shapes in groups too) one line each (bullets as
written, a line Markdown would read as a block marker escaped: :func:`~.base.escape_block`), a
table a pipe table. Speaker notes are left out. :attr:`Converted.pages` holds where each slide starts.

The package is checked against :meth:`ConversionLimits.check_package` first (``too_large``); a
password-protected deck is ``encrypted`` (:func:`~.docx.open_package`); a file python-pptx cannot
parse is ``unreadable_file``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from latechunk_dagster.sources.converters.base import (
    ConversionLimits,
    Converted,
    Rejection,
    converter_name,
    escape_block,
    heading,
    table_markdown,
    tidy,
)
from latechunk_dagster.sources.converters.docx import open_package

#: Version of this module's rules (slide titles, shapes, tables): part of the converter's name.
RULES = 2


def _shapes(shapes: Any) -> Iterator[Any]:
    """The shapes of a slide in order, those inside groups included (python-pptx's ``slide.shapes``
    lists a group as one shape: its members' text was lost). Iterative: groups nest without limit."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    stack = [iter(shapes)]
    while stack:
        shape = next(stack[-1], None)
        if shape is None:
            stack.pop()
        elif shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            stack.append(iter(shape.shapes))
        else:
            yield shape


def convert_pptx(data: bytes, limits: ConversionLimits) -> Converted:
    """Markdown text of a PPTX deck, with the start of each slide.

    Raises:
        Rejection: ``unreadable_file`` or ``too_large`` (module docstring).
    """
    from pptx import Presentation

    open_package(data, limits, "PPTX").close()
    try:
        slides = []
        for slide in Presentation(io.BytesIO(data)).slides:
            title = slide.shapes.title
            blocks = [heading(2, title.text_frame.text)] if title is not None and title.text_frame.text.strip() else []
            for shape in _shapes(slide.shapes):
                if title is not None and shape.shape_id == title.shape_id:
                    continue
                if shape.has_table:
                    blocks.append(table_markdown([[c.text for c in row.cells] for row in shape.table.rows]))
                elif shape.has_text_frame:
                    lines = [p.text.strip() for p in shape.text_frame.paragraphs if p.text.strip()]
                    if lines:
                        blocks.append(escape_block("\n".join(lines)))
            slides.append(tidy("\n\n".join(blocks)))
    except Exception as exc:  # any parser failure on a hostile file is the file's fault
        raise Rejection("unreadable_file", f"not a readable PPTX ({type(exc).__name__}: {exc})") from None
    text, starts = "", []
    for body in slides:
        text += "\n\n" if text and body else ""
        starts.append(len(text))
        text += body
    return Converted(text, converter_name("pptx", RULES, "python-pptx"), tuple(starts))
