"""Sections of docs/benchmarks.md measured by commands of their own (``streaming``,
``streaming-operators``, ``first-run``, ``negation``, ``whole-call``, ``flink-cep``): each is written to ``docs/benchmarks/<name>.md`` and embedded between
markers, so that regenerating the main report keeps them."""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from pathlib import Path
from typing import Any, Callable, Sequence

SECTIONS = ("first-run", "streaming", "streaming-operators", "negation", "whole-call", "flink-cep")
"""In the order they appear, before the Files section."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


_RELATIVE_LINK = re.compile(r"(\]\()(?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)(\))", re.IGNORECASE)


def links_from_docs(section: str) -> str:
    """A section's text as ``docs/benchmarks.md`` embeds it: its relative link targets,
    written for ``docs/benchmarks/<name>.md``, rewritten for a file in ``docs/``
    (``flink-cep-groups.png`` -> ``benchmarks/flink-cep-groups.png``,
    ``../language.md#...`` -> ``language.md#...``), so that both files' links resolve."""
    return _RELATIVE_LINK.sub(
        lambda m: m.group(1) + posixpath.normpath(posixpath.join("benchmarks", m.group(2))) + m.group(3), section)


def embed(docs_dir: Path, name: str) -> None:
    """Put ``benchmarks/<name>.md`` into ``benchmarks.md`` between its markers (before the
    Files section), replacing an earlier copy."""
    section_path = docs_dir / "benchmarks" / f"{name}.md"
    md = docs_dir / "benchmarks.md"
    if not section_path.exists() or not md.exists():
        return
    begin, end = markers(name)
    text = md.read_text()
    block = f"{begin}\n{links_from_docs(section_path.read_text().rstrip())}\n{end}\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + block.rstrip("\n") + text[b:]
    elif "\n## Files" in text:
        at = text.index("\n## Files") + 1
        text = text[:at] + block + "\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    md.write_text(text)


def new_result(quick: bool, **fields: Any) -> dict:
    """A section's measurements with what every section records: mode, date, cores."""
    return {"quick": quick, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cores": os.cpu_count(), **fields}


def save(name: str, result: dict, out_dir: Path, docs_dir: Path | None,
         write_report: Callable[[dict, Path], Any]) -> dict:
    """``out_dir/<name>.json``, and the section's report where docs are written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2))
    if docs_dir is not None:
        write_report(result, docs_dir)
    return result


def _in_repository(path: str | Path, root: Path | None) -> str | None:
    """``path`` relative to the repository (``root``, default the checkout's), in POSIX form;
    None where it lies outside."""
    if root is None:
        from cogra.bench import repository_root

        root = repository_root()
    try:
        return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(root))).as_posix()
    except ValueError:
        return None


def raw_results(files: Sequence[tuple[str, Path]], root: Path | None = None) -> str:
    """The line that names a run's result files in the docs, by repository-relative paths:
    ``Raw results: `bench-results/<stamp>/first-run.json` (git-ignored).``  A results
    directory outside the repository (``--out /elsewhere``) is named as the run's results
    directory, never by its absolute path: the docs travel with the repository, not with
    the machine that measured them.  ``files``: (what it is, path), the first the raw
    results (``[("Raw results", p), ("machine description", q)]``)."""
    shown = [_in_repository(path, root) for _, path in files]
    if None in shown:
        parts = [f"{label}: `{path.name}`" for label, path in files]
        return ", ".join(parts) + ", in the run's results directory (outside the repository)."
    ignored = " (git-ignored)" if shown[0].startswith("bench-results/") else ""
    parts = [f"{label}: `{rel}`" for (label, _), rel in zip(files, shown)]
    return parts[0] + ignored + "".join(f", {p}" for p in parts[1:]) + "."


_PATH_OPTIONS = {"--out": "<results dir>", "--report-only": "<results dir>", "--docs": "<docs dir>"}


def shown_command(command: str, root: Path | None = None) -> str:
    """``command`` as the docs show it: an absolute path in it becomes repository-relative,
    or, outside the repository, a placeholder (``--out /scratch/run`` -> ``--out <results
    dir>``)."""
    def shown(path: str, option: str | None) -> str:
        rel = _in_repository(path, root)
        return _PATH_OPTIONS.get(option or "", "<path>") if rel is None else (rel or ".")

    words, option = [], None
    for word in command.split(" "):
        name, eq, value = word.partition("=")
        if eq and name.startswith("--") and os.path.isabs(value):
            word = f"{name}={shown(value, name)}"
        elif os.path.isabs(word):
            word = shown(word, option)
        words.append(word)
        option = word if word.startswith("--") else None
    return " ".join(words)


def generated_by(name: str, result: dict) -> str:
    """A section's opening words: its command, when, in which mode, on how many cores."""
    return (f"Generated by `cogra bench --experiments {name}{' --quick' if result['quick'] else ''}` on "
            f"{result['date']}{' (**quick mode**)' if result['quick'] else ''}, {result['cores']} cores")


def write_section(docs_dir: Path, name: str, lines: list[str]) -> Path:
    """``docs_dir/benchmarks/<name>.md`` from ``lines``, embedded in benchmarks.md, and the
    README's headline table read again from it (its whole-call and Flink rows come from
    sections)."""
    from cogra.bench import readme

    path = docs_dir / "benchmarks" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    embed(docs_dir, name)
    readme.update(docs_dir.parent / "README.md", docs_dir / "benchmarks.md")
    return path


def embed_all(docs_dir: Path) -> None:
    for name in SECTIONS:
        embed(docs_dir, name)


__all__ = ["SECTIONS", "embed", "embed_all", "generated_by", "links_from_docs", "markers", "new_result",
           "raw_results", "save", "shown_command", "write_section"]
