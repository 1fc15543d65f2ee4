"""How an IRModule shows itself: a one-line repr, the script as str, highlighted HTML."""

from __future__ import annotations

import re

from rvm.testing.programs import PROGRAMS

LISTS = next(p for p in PROGRAMS if p.name == "adt_list").mod


def test_repr_is_one_line_and_str_is_the_script():
    text = repr(LISTS)
    assert "\n" not in text
    assert text == "<IRModule functions=[total, build, sum_nt, main, main_nt] adts=[List]>"
    assert str(LISTS) == LISTS.script() and "def total(" in str(LISTS)


def test_repr_html_is_the_highlighted_script(parse_html):
    markup = LISTS._repr_html_()
    parser = parse_html(markup)
    assert "".join(parser.text) == LISTS.script()
    assert [t for t, _ in parser.tags][0] == "pre"
    coloured = re.findall(r'<span style="[^"]*">([^<]*)</span>', markup)
    for name in ("total", "build", "main", "List", "op.add", "match", "case", "return"):
        assert name in coloured, name
    assert "&quot;float32&quot;" in coloured
