"""The HTML helpers behind `_repr_html_` (`rvm._html`)."""

from __future__ import annotations

import html
import re

from rvm import _html

SOURCE = """@module
class M:
    @func
    def main(x: T[("n", 4), "float32"]):  # a <comment>
        match = op.add(x, x)
        if op.sum(match) > 0.5:
            return x
        return op.nn.relu(x)
"""


def spans(markup: str) -> list[tuple[str, str]]:
    """(colour key, text) of every coloured span."""
    by_style = {style: key for key, style in _html.COLOURS.items()}
    return [
        (by_style[style], html.unescape(text))
        for style, text in re.findall(r'<span style="([^"]*)">(.*?)</span>', markup)
    ]


def test_highlight_keeps_the_text_and_colours_each_token_class(parse_html):
    markup = _html.highlight(SOURCE)
    parser = parse_html(markup)
    assert "".join(parser.text) == SOURCE  # nothing added, nothing lost
    found = spans(markup)
    assert ("decorator", "@module") in found and ("decorator", "@func") in found
    assert ("keyword", "class") in found and ("def", "M") in found
    assert ("keyword", "def") in found and ("def", "main") in found
    assert ("string", '"float32"') in found and ("number", "4") in found
    assert ("comment", "# a <comment>") in found
    assert ("op", "op.add") in found and ("op", "op.sum") in found and ("op", "op.nn.relu") in found
    assert ("keyword", "return") in found and ("keyword", "if") in found
    assert ("keyword", "match") not in found  # a variable here, not a match statement
    assert "&lt;comment&gt;" in markup and "<comment>" not in markup


def test_highlight_of_untokenizable_text_is_only_escaped():
    assert _html.highlight('x = "unterminated\n  <b>') == _html.escape('x = "unterminated\n  <b>')


def test_table_escapes_aligns_numbers_and_keeps_markup(parse_html):
    markup = _html.table(
        ("name", "n"),
        [("<a>&", 3), (_html.Markup("<i>x</i>"), 4)],
        numeric=[1],
        foot=[("total", 7)],
    )
    parser = parse_html(markup)
    assert "&lt;a&gt;&amp;" in markup and "<i>x</i>" in markup
    cells = [(tag, attrs["style"]) for tag, attrs in parser.tags if tag in ("td", "th")]
    assert [t for t, _ in cells] == ["th", "th", "td", "td", "td", "td", "td", "td"]
    aligns = [re.search(r"text-align: (\w+)", style).group(1) for _, style in cells]
    assert aligns == ["left", "right"] * 4
    assert [t for t, _ in parser.tags].count("tfoot") == 1
    assert "<thead>" not in _html.table((), [("a", "b")])


def test_bar_width_is_the_clamped_share(parse_html):
    for share, width in ((0.25, "25.0%"), (1.7, "100.0%"), (-0.1, "0.0%")):
        parser = parse_html(_html.bar(share))
        widths = [re.search(r"width: ([\d.]+%)", a["style"]) for _, a in parser.tags]
        assert [w.group(1) for w in widths if w] == [width]


def test_details_and_code_block(parse_html):
    parser = parse_html(_html.details("bytecode <x>", _html.code_block("a < b")))
    assert [t for t, _ in parser.tags] == ["details", "summary", "pre"]
    assert parser.text == ["bytecode <x>", "a < b"]
