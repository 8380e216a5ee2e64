"""Sections of docs/benchmarks.md measured by commands of their own (``streaming``,
``first-run``, ``negation``, ``whole-call``, ``flink-cep``): each is written to ``docs/benchmarks/<name>.md`` and embedded between
markers, so that regenerating the main report keeps them."""

from __future__ import annotations

from pathlib import Path

SECTIONS = ("first-run", "streaming", "negation", "whole-call", "flink-cep")
"""In the order they appear, before the Files section."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def embed(docs_dir: Path, name: str) -> None:
    """Put ``benchmarks/<name>.md`` into ``benchmarks.md`` between its markers (before the
    Files section), replacing an earlier copy."""
    section_path = docs_dir / "benchmarks" / f"{name}.md"
    md = docs_dir / "benchmarks.md"
    if not section_path.exists() or not md.exists():
        return
    begin, end = markers(name)
    text = md.read_text()
    block = f"{begin}\n{section_path.read_text().rstrip()}\n{end}\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + block.rstrip("\n") + text[b:]
    elif "\n## Files" in text:
        at = text.index("\n## Files") + 1
        text = text[:at] + block + "\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    md.write_text(text)


def embed_all(docs_dir: Path) -> None:
    for name in SECTIONS:
        embed(docs_dir, name)


__all__ = ["SECTIONS", "embed", "embed_all", "markers"]
