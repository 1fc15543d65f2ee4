"""HTML for notebook display (`_repr_html_`), shared by the IR and the runtime.

Standard library only, so both `rvm.ir` and `rvm.runtime` may import it without breaking the
layering. Styles are inline attributes, not a `<style>` block: notebook front ends that
sanitize output (and GitHub's renderer) keep those. Every text that reaches the HTML goes
through `escape`, except `Markup`, which is HTML built here.
"""

from __future__ import annotations

import html
import io
import keyword
import token
import tokenize
from collections.abc import Iterable, Sequence

__all__ = ["Markup", "escape", "table", "bar", "details", "box", "code_block", "highlight"]

FONT = "font-family: SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px"
_CELL = "padding: 2px 8px; border-bottom: 1px solid #ddd"
_PRE = f"{FONT}; line-height: 1.35; margin: 4px 0; padding: 6px 8px; background: #f7f7f7"

# Token classes of `highlight` and their colours (a light theme close to Pygments' default).
COLOURS = {
    "keyword": "color: #008000; font-weight: bold",
    "def": "color: #0000ff; font-weight: bold",  # the name a def or class statement binds
    "decorator": "color: #aa22ff",
    "op": "color: #7d2ebf",  # `op.name`, an rvm operator
    "string": "color: #ba2121",
    "number": "color: #666666",
    "comment": "color: #3d7b7b; font-style: italic",
}


class Markup(str):
    """HTML that `table` and friends insert as it is instead of escaping it."""

    __slots__ = ()


def escape(value: object) -> Markup:
    """`str(value)` with `&`, `<`, `>` and quotes escaped."""
    return value if isinstance(value, Markup) else Markup(html.escape(str(value)))


def _span(style: str, text: str) -> str:
    return f'<span style="{style}">{escape(text)}</span>'


def table(
    head: Sequence[str],
    rows: Iterable[Sequence[object]],
    numeric: Iterable[int] = (),
    foot: Iterable[Sequence[object]] = (),
) -> Markup:
    """A table with a header row; the columns in `numeric` are right-aligned.

    Args:
        head: Column titles; empty for a table without a header row.
        rows: Body rows, one value per column (escaped unless `Markup`).
        numeric: Indices of the right-aligned columns (numbers).
        foot: Rows after the body, in bold (totals).
    """
    right = set(numeric)

    def cells(tag: str, values: Sequence[object], extra: str = "") -> str:
        out = []
        for i, v in enumerate(values):
            align = "right" if i in right else "left"
            out.append(f'<{tag} style="{_CELL}; text-align: {align}{extra}">{escape(v)}</{tag}>')
        return "<tr>" + "".join(out) + "</tr>"

    parts = [f'<table style="border-collapse: collapse; {FONT}">']
    if head:
        parts.append("<thead>" + cells("th", head, "; background: #f0f0f0") + "</thead>")
    parts.append("<tbody>" + "".join(cells("td", r) for r in rows) + "</tbody>")
    foot = list(foot)
    if foot:
        parts.append("<tfoot>" + "".join(cells("td", r, "; font-weight: bold") for r in foot))
        parts.append("</tfoot>")
    parts.append("</table>")
    return Markup("".join(parts))


def bar(fraction: float, colour: str = "#4c78a8") -> Markup:
    """A horizontal bar `fraction` (clamped to 0..1) of its cell wide, and the percentage."""
    pct = 100.0 * min(max(fraction, 0.0), 1.0)
    return Markup(
        '<div style="display: flex; align-items: center; gap: 6px; min-width: 160px">'
        '<div style="flex: 1; background: #eee; height: 10px">'
        f'<div style="width: {pct:.1f}%; background: {colour}; height: 10px"></div></div>'
        f'<span style="min-width: 44px; text-align: right">{pct:.1f}%</span></div>'
    )


def details(summary: str, body: str) -> Markup:
    """A collapsed `<details>` element titled `summary` around the HTML `body`."""
    return Markup(f"<details><summary>{escape(summary)}</summary>{body}</details>")


def box(title: str, *parts: str) -> Markup:
    """A block with a bold title line above the HTML `parts`."""
    head = f'<div style="font-weight: bold; margin-bottom: 4px">{escape(title)}</div>'
    return Markup(f'<div style="{FONT}">{head}{"".join(parts)}</div>')


def code_block(text: str, highlighted: bool = False) -> Markup:
    """`text` in a `<pre>`; with `highlighted`, coloured as Python source by `highlight`."""
    body = highlight(text) if highlighted else escape(text)
    return Markup(f'<pre style="{_PRE}">{body}</pre>')


def highlight(source: str) -> Markup:
    """Python (and so rvm script) source as escaped HTML with coloured tokens.

    Tokens come from the standard `tokenize` module; the text between them (spaces,
    punctuation, line breaks) is copied as it is, so the result reads exactly as `source`.
    Source that does not tokenize is returned escaped and uncoloured.
    """
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return escape(source)
    out: list[str] = []
    pos = 0
    for i in range(len(tokens)):
        kind, last = _token_class(tokens, i)
        if kind is None:
            continue
        first = tokens[i]
        start = offsets[first.start[0] - 1] + first.start[1]
        end = offsets[tokens[last].end[0] - 1] + tokens[last].end[1]
        if start < pos:  # inside a span already coloured
            continue
        out.append(escape(source[pos:start]))
        out.append(_span(COLOURS[kind], source[start:end]))
        pos = end
    out.append(escape(source[pos:]))
    return Markup("".join(out))


def _dotted_end(tokens: list[tokenize.TokenInfo], i: int) -> int:
    """The index of the last token of the dotted name that starts at token `i`."""
    while i + 2 < len(tokens) and tokens[i + 1].string == "." and tokens[i + 2].type == token.NAME:
        i += 2
    return i


def _token_class(tokens: list[tokenize.TokenInfo], i: int) -> tuple[str | None, int]:
    """The `COLOURS` key of the span starting at token `i` (None: leave it plain) and the
    index of the span's last token."""
    tok = tokens[i]
    kinds = {token.STRING: "string", token.NUMBER: "number", token.COMMENT: "comment"}
    if tok.type in kinds:
        return kinds[tok.type], i
    if tok.type == token.OP and tok.string == "@" and _first_on_line(tokens, i):
        return "decorator", _dotted_end(tokens, i + 1) if i + 1 < len(tokens) else i
    if tok.type != token.NAME:
        return None, i
    prev = tokens[i - 1] if i > 0 else None
    after = tokens[i + 1] if i + 1 < len(tokens) else None
    if prev is not None and prev.type == token.NAME and prev.string in ("def", "class"):
        return "def", i
    if keyword.iskeyword(tok.string):
        return "keyword", i
    if tok.string in ("match", "case") and _first_on_line(tokens, i):
        # soft keywords: they open a statement only when no assignment or attribute follows
        plain = after is None or after.type == token.NEWLINE or after.string in ("=", ".", ":")
        return (None if plain else "keyword"), i
    if tok.string == "op" and (prev is None or prev.string != "."):
        last = _dotted_end(tokens, i)
        return ("op" if last > i else None), last
    return None, i


def _first_on_line(tokens: list[tokenize.TokenInfo], i: int) -> bool:
    """Whether token `i` begins its logical line."""
    j = i - 1
    while j >= 0 and tokens[j].type in (token.INDENT, token.DEDENT):
        j -= 1
    return j < 0 or tokens[j].type in (token.NEWLINE, token.NL, token.COMMENT)
