"""The table of phrases of docs/MAINTENANCE.md that ``is_correction`` must answer as listed.

The table is read from the document, so what the document shows is what the tests run: each row
is ``| `message` | yes/no | why |``, and ``\\n`` in a message stands for a line break.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "MAINTENANCE.md"
ROW = re.compile(r"^\| `(?P<message>[^`]*)` \| (?P<answer>yes|no) \|")


def phrases() -> list[tuple[str, bool]]:
    """(message, expected answer) for every row of the table, in document order."""
    rows = [
        (m["message"].replace("\\n", "\n"), m["answer"] == "yes")
        for line in DOC.read_text(encoding="utf-8").splitlines()
        if (m := ROW.match(line))
    ]
    assert len(rows) >= 30, "the table of phrases is missing from docs/MAINTENANCE.md"
    return rows
