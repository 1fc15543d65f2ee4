"""One source writer: the lines of a generated function, each with its indent and pc.

The compiled and native modes write their functions through it. A line that runs an
instruction carries its pc, and the writer notes the instruction after it (`# pc 7:
invoke_packed fused_add`), so every generated file reads the same; the compiled mode maps a
failing line back to its pc through `line_pcs` (the VM stack of its errors).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["INDENT", "SourceWriter"]

INDENT = "    "


class SourceWriter:
    """Collects `(indent, text, pc)` lines and joins them into source.

    Args:
        describe: The text of the instruction at a pc, for the note after its lines.
    """

    def __init__(self, describe: Callable[[int], str]) -> None:
        self._describe = describe
        self._lines: list[tuple[int, str, int | None]] = []
        self._returns: dict[int, str] = {}  # a return's line: the value it returns

    def line(self, indent: int, text: str, pc: int | None = None) -> None:
        """Appends `text` at `indent` levels; with `pc`, noted with the instruction it runs."""
        if pc is not None:
            text = f"{text}  # pc {pc}: {self._describe(pc)}"
        self._lines.append((indent, text, pc))

    def ret(self, indent: int, value: str, pc: int | None = None) -> None:
        """Appends ``return value``, kept as a return (`ending` writes a statement before it)."""
        self._returns[len(self._lines)] = value
        self.line(indent, f"return {value}", pc)

    def reset(self) -> None:
        """Drops every line written so far (a mode starting its function over)."""
        self._lines = []
        self._returns = {}

    @property
    def lines(self) -> list[str]:
        """The lines as text, indented, without newlines."""
        return [INDENT * indent + text for indent, text, _ in self._lines]

    def ending(self, end: str) -> list[str]:
        """`lines` with the statement ``end`` before each return (`ret`), after its value is
        computed (so what a tail call does comes before ``end``)."""
        out = []
        for i, (indent, text, pc) in enumerate(self._lines):
            value = self._returns.get(i)
            if value is None:
                out.append(INDENT * indent + text)
                continue
            note = "" if pc is None else f"  # pc {pc}: {self._describe(pc)}"
            pad = INDENT * indent
            out += [f"{pad}_ret = {value}{note}", pad + end, f"{pad}return _ret"]
        return out

    @property
    def source(self) -> str:
        """The lines joined, each ending in a newline."""
        return "".join(line + "\n" for line in self.lines)

    @property
    def line_pcs(self) -> tuple[int | None, ...]:
        """Per line (index = line number - 1), the pc it runs, or None."""
        return tuple(pc for _, _, pc in self._lines)
