"""README.md's code blocks, for the tests that run them as printed."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_block(heading: str, lang: str) -> str:
    """The first ``lang`` code block under the section ``heading`` (its whole heading line)."""
    readme = README.read_text()
    section = readme[readme.index(heading) :]
    block = re.search(rf"^```{lang}\n(.*?)^```", section, flags=re.S | re.M)
    assert block is not None, f"no {lang} block under {heading!r} in README.md"
    return block.group(1)
