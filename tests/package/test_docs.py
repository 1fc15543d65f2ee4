"""docs/architecture.md keeps up with the code it describes."""

from __future__ import annotations

from pathlib import Path

from rvm.runtime.bytecode import Opcode
from rvm.transform.pipeline import default_passes

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_every_opcode_is_documented():
    text = DOC.read_text()
    missing = [
        op.name for op in Opcode if f"`{op.name} " not in text and f"`{op.name}`" not in text
    ]
    assert not missing, f"docs/architecture.md does not describe {missing}"


def test_every_pass_is_in_the_documented_pipeline():
    text = DOC.read_text()
    missing = [name for name, _ in default_passes() if name not in text]
    assert not missing, f"docs/architecture.md's pipeline lacks {missing}"
