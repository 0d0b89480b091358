"""Anthropic text blocks with web citations, from OpenAI's ``url_citation`` annotations: the
whole message's text is cut into blocks at the cited spans (:func:`cited_text`), each cited block
carrying Anthropic's ``web_search_result_location`` citations; the stream encoder of
:mod:`proxy.dialects.anthropic_replies` sends the same citations as ``citations_delta`` events.
Malformed annotations are skipped, never an error.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct


class WebCitation(Struct, tag="web_search_result_location", tag_field="type"):
    cited_text: str
    url: str
    title: str | None
    encrypted_index: str = ""  # Anthropic's own reference into its search results: none here


class TextOut(Struct, tag="text", tag_field="type"):
    text: str
    citations: list[WebCitation] | None = None


def url_citation(annotation: Any) -> dict[str, Any] | None:
    """An OpenAI ``url_citation`` annotation's body, or None for anything else."""
    if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
        return None
    body = annotation.get("url_citation")
    if not isinstance(body, dict) or not isinstance(body.get("url"), str) or not body["url"]:
        return None
    return body


def _span(body: dict[str, Any], length: int) -> tuple[int, int] | None:
    start, end = body.get("start_index"), body.get("end_index")
    if isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= length:
        return start, end
    return None


def citation_of(body: dict[str, Any], text: str) -> WebCitation:
    """Anthropic's web citation for an OpenAI ``url_citation`` of ``text`` (the whole answer)."""
    title = body.get("title")
    span = _span(body, len(text))
    return WebCitation(
        cited_text=text[span[0] : span[1]] if span is not None else "",
        url=body["url"],
        title=title if isinstance(title, str) and title else None,
    )


def cited_text(text: str, annotations: Any) -> list[TextOut]:
    """``text`` as Anthropic text blocks: each span OpenAI's ``url_citation`` annotations cite
    becomes a block of its own carrying those citations (overlapping spans share one), the
    rest plain blocks; a citation without a usable span goes to the last block."""
    spans: list[tuple[int, int, WebCitation]] = []
    loose: list[WebCitation] = []
    for annotation in annotations:
        body = url_citation(annotation)
        if body is None:
            continue
        span = _span(body, len(text))
        if span is None:
            loose.append(citation_of(body, text))
        else:
            spans.append((*span, citation_of(body, text)))
    if not spans and not loose:
        return [TextOut(text=text)]
    blocks: list[TextOut] = []
    position = 0
    spans.sort(key=lambda span: span[0])
    groups: list[tuple[int, int, list[WebCitation]]] = []
    for start, end, citation in spans:
        if groups and start < groups[-1][1]:
            first, last, cited = groups[-1]
            groups[-1] = (first, max(last, end), [*cited, citation])
        else:
            groups.append((start, end, [citation]))
    for start, end, cited in groups:
        if start > position:
            blocks.append(TextOut(text=text[position:start]))
        blocks.append(TextOut(text=text[start:end], citations=cited))
        position = end
    if position < len(text):
        blocks.append(TextOut(text=text[position:]))
    if loose:
        final = blocks[-1]
        final.citations = [*(final.citations or ()), *loose]
    return blocks
