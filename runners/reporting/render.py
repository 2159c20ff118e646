"""Reports as one Markdown text, rendered to a self-contained HTML page by markdown-it-py
(figures embedded), so the two never say different things."""

from __future__ import annotations

import base64
import html
from pathlib import Path

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
         "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}th{background:#f3f3f3}"
         "img{max-width:100%}p>em:only-child{font-size:13px}")


def _cell(value) -> str:
    return str(value).replace("|", "\\|")


class Document:
    """A report's Markdown, written block by block; `html` renders it."""

    def __init__(self):
        self.blocks: list[str] = []
        self.images: dict[str, Path] = {}  # file name in the Markdown -> the PNG

    def heading(self, text: str, level: int = 2):
        self.blocks.append("#" * level + " " + text)

    def para(self, text: str):
        self.blocks.append(text)

    def table(self, headers: list[str], rows: list[list]):
        self.blocks.append("\n".join(["| " + " | ".join(map(_cell, headers)) + " |", "|" + "---|" * len(headers),
                                      *("| " + " | ".join(map(_cell, row)) + " |" for row in rows)]))

    def bullets(self, items: list[str]):
        if items:
            self.blocks.append("\n".join(f"- {item}" for item in items))

    def image(self, path: Path, caption: str):
        self.images[path.name] = path
        self.blocks.append(f"![{caption}]({path.name})\n\n*{caption}*")

    def markdown(self) -> str:
        return "\n\n".join(self.blocks) + "\n"

    def html(self, title: str) -> str:
        from markdown_it import MarkdownIt

        md = MarkdownIt("commonmark", {"html": False}).enable("table")

        def embedded(renderer, tokens, index, options, env):
            token = tokens[index]
            data = base64.b64encode(self.images[token.attrGet("src")].read_bytes()).decode()
            return f"<img src='data:image/png;base64,{data}' alt='{html.escape(token.content)}'>"

        md.add_render_rule("image", embedded)
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{STYLE}</style></head><body>\n{md.render(self.markdown())}</body></html>\n")
