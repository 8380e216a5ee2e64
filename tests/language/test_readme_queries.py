"""Every query the README's language reference prints (its plain ``` blocks holding a
PATTERN clause) parses and binds: an example that has gone stale fails here."""

from __future__ import annotations

from pathlib import Path

import cogra

README = Path(__file__).resolve().parents[2] / "README.md"


def plain_blocks() -> list[str]:
    """The bodies of fenced blocks without a language, fences paired line by line."""
    blocks, body, language = [], None, None
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            if body is None:
                body, language = [], line[3:].strip()
            else:
                if not language:
                    blocks.append("\n".join(body))
                body = None
            continue
        if body is not None:
            body.append(line)
    return blocks


def queries() -> list[str]:
    return [b for b in plain_blocks() if "PATTERN " in b and "RETURN " in b]


def test_the_readme_language_examples_plan() -> None:
    found = queries()
    assert any("NOT Cancel C" in q for q in found) and any("M{5,}" in q for q in found)
    for query in found:
        if query.lstrip().startswith("RETURN   item"):
            continue  # the grammar itself
        plan = cogra.plan(query)
        assert plan.bound.automaton.names
