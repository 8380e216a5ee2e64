"""The documentation travels with the code: every link and repository path in the README
and docs/ resolves inside the repository, and nothing points outside it.

Checked in ``README.md``, ``sql/README.md`` and every ``docs/**/*.md``:

* each relative markdown link or image, ``[text](target)``: the target exists in the
  repository (and does not leave it); a ``#fragment`` names a heading of the target file
  (or of the file itself), by GitHub's anchor rules;
* each backticked repository path (``docs/...``, ``sql/...``, ``python/...``, ``tests/...``,
  ``jvm-shim/...``, ``scripts/...``) exists; ``...`` stands for any directories;
* no text names a place outside the repository: ``../shared``, ``/work/``, ``/tmp/``,
  ``/home/``, ``file://``.

External ``http(s)`` and ``mailto`` links are allowed and not fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def documents(root: Path = ROOT) -> list[Path]:
    found = [root / "README.md", root / "sql" / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [p for p in found if p.exists()]


FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^()\s<>]+(?:\([^()\s]*\)[^()\s<>]*)*)>?"
                   r"(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)
REPOSITORY_PATH = re.compile(r"^(docs|sql|python|tests|jvm-shim|scripts)/\S*$")
OUTSIDE = ("../shared", "/work/", "/tmp/", "/home/", "file://")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: its text (links as their text, code without
    backquotes), lowercase, punctuation removed, spaces as hyphens."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", title)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file; repeated headings get ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = anchor(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _exists(pattern: str, root: Path) -> bool:
    """A repository path, ``...`` standing for any directories in between."""
    if "..." not in pattern:
        target = root / pattern.rstrip("/")
        return target.exists() and _inside(target, root)
    glob = re.sub(r"/?\.\.\./?", "/**/", pattern).strip("/").replace("//", "/")
    return any(_inside(p, root) for p in root.glob(glob))


def problems(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links and paths of one markdown file (empty: nothing)."""
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(root).as_posix()
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for bad in OUTSIDE:
            if bad in line:
                found.append(f"{where}:{number}: points outside the repository ({bad!r}): {line.strip()[:120]}")
    for number, line in prose_lines(text):
        for span in CODE_SPAN.finditer(line):
            code = span.group(2).strip()
            if REPOSITORY_PATH.match(code) and not re.search(r"[<>*{}]", code) and not _exists(code, root):
                found.append(f"{where}:{number}: no such repository path `{code}`")
        for link in LINK.finditer(CODE_SPAN.sub("", line)):
            target = link.group(2)
            if EXTERNAL.match(target):
                continue
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("/"):
                found.append(f"{where}:{number}: link outside the repository: {target}")
                continue
            file_part, _, fragment = target.partition("#")
            linked = (path.parent / file_part) if file_part else path
            if not _inside(linked, root):
                found.append(f"{where}:{number}: link leaves the repository: {target}")
            elif not linked.exists():
                found.append(f"{where}:{number}: broken link: {target}")
            elif fragment:
                if linked.is_dir() or linked.suffix != ".md":
                    found.append(f"{where}:{number}: anchor on a file that is not markdown: {target}")
                elif fragment not in anchors(linked):
                    found.append(f"{where}:{number}: no heading #{fragment} in "
                                 f"{linked.resolve().relative_to(root.resolve()).as_posix()}")
    return found


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_and_paths_resolve_inside_the_repository(path: Path) -> None:
    found = problems(path)
    assert not found, "\n".join(found)


def test_the_language_reference_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/language.md)" in readme


def test_anchors_follow_githubs_rules() -> None:
    assert anchor("Numbers: exactness and overflow") == "numbers-exactness-and-overflow"
    assert anchor("Early results (Update mode)") == "early-results-update-mode"
    assert anchor("SEQ, Kleene plus, star, optional and alternation") == \
        "seq-kleene-plus-star-optional-and-alternation"
    assert anchor("`cogra bench` and [the report](docs/benchmarks.md)") == "cogra-bench-and-the-report"
    assert anchor("Spark: the plan and the worker's routes") == "spark-the-plan-and-the-workers-routes"


def test_the_check_finds_broken_links_and_paths_outside(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A section\n")
    doc = tmp_path / "docs" / "page.md"
    doc.write_text("# Page\n\n"
                   "[fine](other.md#a-section) [self](#page) [web](https://example.org/x)\n"
                   "[gone](missing.md) [anchor](other.md#no-such-section) [up](../../elsewhere.md)\n"
                   "See `docs/other.md` and `docs/nothing.md`; the spec is `../shared/spec/X.md`.\n"
                   "Raw results: `/tmp/run/results.csv`.\n"
                   "```\n[in code](not-checked.md)\n```\n")
    found = problems(doc, tmp_path)
    expected = ["docs/page.md:4: broken link: missing.md",
                "docs/page.md:4: no heading #no-such-section in docs/other.md",
                "docs/page.md:4: link leaves the repository: ../../elsewhere.md",
                "docs/page.md:5: no such repository path `docs/nothing.md`",
                "docs/page.md:5: points outside the repository ('../shared')",
                "docs/page.md:6: points outside the repository ('/tmp/')"]
    assert all(sum(f.startswith(e) for f in found) == 1 for e in expected), found
    assert len(found) == len(expected), found
