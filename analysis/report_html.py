"""``report.html``: the markdown report as one self-contained page to mail or attach.

Why from the markdown: the page is ``render()``'s markdown converted by markdown-it-py (CommonMark
plus GitHub tables), so every section report.md has, now or later, is in the page too, and the
two never disagree. Why self-contained: a report is shared as one file, opened from a mail or a
chat, often offline; so the plots are embedded as base64 ``data:`` URIs, the style and the
table-sorting script are inline, and a Content-Security-Policy forbids the page to load anything
at all. Raw HTML in the markdown is escaped, not passed through (a warning quoting a server's
message cannot inject markup).
"""

from __future__ import annotations

import base64
import html
import mimetypes
from importlib import resources
from pathlib import Path

from markdown_it import MarkdownIt

from core.errors import AnalysisError
from core.whole_files import write_whole

REPORT_HTML = "report.html"
# Nothing from the network or the disk: data: images, the inline style and script only.
CONTENT_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def _asset(name: str) -> str:
    return resources.files("analysis").joinpath(f"data/{name}").read_text()


def data_uri(path: Path) -> str:
    """A file as a ``data:`` URI; the image must exist (the page has no other way to show it)."""
    if not path.is_file():
        raise AnalysisError(f"{path}: the report shows this plot but the file is missing; re-run rigbench report")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _is_local(src: str) -> bool:
    return "://" not in src and not src.startswith(("data:", "//"))


def markdown_to_html(markdown: str, base: Path) -> str:
    """The body HTML of ``markdown``, with each local image (relative to ``base``) embedded."""
    converter = MarkdownIt("commonmark", {"html": False}).enable("table")

    def image(renderer, tokens, index, options, env) -> str:
        token = tokens[index]
        src = str(token.attrGet("src") or "")
        if _is_local(src):
            token.attrSet("src", data_uri(base / src))
        return renderer.image(tokens, index, options, env)

    converter.add_render_rule("image", image)
    return converter.render(markdown)


def _title(markdown: str) -> str:
    first = next((line for line in markdown.splitlines() if line.startswith("# ")), "# rigbench report")
    return first[2:].strip()


def render_html(markdown: str, base: Path) -> str:
    """The whole page: head (policy, style), the converted markdown, the sorting script."""
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_POLICY}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(_title(markdown))}</title>",
            f"<style>\n{_asset('report.css')}</style>",
            "</head>",
            "<body>",
            "<main>",
            markdown_to_html(markdown, base),
            "</main>",
            f"<script>\n{_asset('report_sort.js')}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def write_html(markdown: str, out: Path) -> Path:
    """``out/report.html`` from the report's markdown, whose image links are relative to ``out``."""
    path = out / REPORT_HTML
    write_whole(path, render_html(markdown, out))
    return path
