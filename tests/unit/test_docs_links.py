"""The docs cite what exists: every relative Markdown link in README.md and docs/*.md points at a
file (or folder) of the repository, and its #anchor at a heading of that file (GitHub's slugs);
every repository path written in backticks (or in a code block) names a file that exists.

A path counts as the repository's when its first part is a top-level entry of the repository
(`agents/`, `deploy/`, `bench/`, `tests/`, …) or a package of the library (`apply/core.py`,
`hub/seeds.py`, `binlogsync_dev/sandbox.py`: read from `agents/binlogsync/` or `agents/`), or
when it is a bare module name (`zerodate.py`), which must exist somewhere in the code.
Placeholders (`<ORIGIN>`, `{schema}`, `NAME.key`, `…`) are not paths.
"""

from __future__ import annotations

import re
import unicodedata
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "agents" / "binlogsync"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^[ ]{0,3}\[[^\]]+\]:[ \t]+<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
# A word that may be a path: letters, digits and . _ - / only, a / inside or a known suffix.
PATHLIKE = re.compile(r"^\.?[A-Za-z0-9_][A-Za-z0-9_./-]*$")
CODE_DIRS = ("agents", "bench", "dags", "plugins", "spark_jobs", "tests", "deploy", ".ci")


def _without_code(text: str) -> str:
    return INLINE.sub(" ", FENCE.sub(" ", text))


def _code_words(text: str) -> list[str]:
    """Every word of inline code spans and fenced blocks."""
    spans = [m.group(0) for m in FENCE.finditer(text)]
    spans += [m.group(2) for m in INLINE.finditer(FENCE.sub(" ", text))]
    words = []
    for span in spans:
        for word in re.split(r"[\s()\[\],;=\"'|]+", span):
            word = word.split("::")[0].rstrip(":.")
            if word:
                words.append(word)
    return words


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation other
    than - and _ dropped, spaces as -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in ("L", "N", "M"))
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    text = FENCE.sub(" ", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for match in HEADING.finditer(text):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links(path: Path) -> list[str]:
    text = _without_code(path.read_text(encoding="utf-8"))
    return [m.group(1) for m in LINK.finditer(text)] + REFERENCE.findall(text)


def broken_links(path: Path) -> list[str]:
    out = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, …
            continue
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            out.append(
                f"{target}: no file {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}"
            )
            continue
        if anchor and where.suffix == ".md" and anchor not in anchors(where):
            out.append(f"{target}: no heading with the anchor #{anchor} in {where.name}")
    return out


@cache
def _file_names() -> frozenset[str]:
    """The name of every file of the repository (its code, deploy files, docs, top level)."""
    names = {p.name for p in ROOT.iterdir() if p.is_file()}
    for top in (*CODE_DIRS, "docs", "examples"):
        for found in (ROOT / top).rglob("*"):
            if ".venv" not in found.parts and "__pycache__" not in found.parts:
                names.add(found.name)
    return frozenset(names)


def _roots(word: str) -> list[Path]:
    """Where a path is read from ([]: not a repository path): the repository's top level, or
    the library (`apply/core.py`) and `agents/` (`binlogsync_dev/sandbox.py`). Any `x/y.py`
    is taken as the repository's."""
    first = word.split("/")[0]
    if (ROOT / first).exists():
        return [ROOT]
    if (LIBRARY / first).is_dir() or (ROOT / "agents" / first).is_dir():
        return [LIBRARY, ROOT / "agents"]
    if word.endswith(".py"):
        return [ROOT, LIBRARY, ROOT / "agents"]
    return []


def ignored(word: str) -> bool:
    """A path the repository ignores (a .gitignore above it names it or a folder it is in) is
    made by a command, not cited (`deploy/compose/secrets`)."""
    parts = Path(word).parts
    for depth in range(len(parts)):
        gitignore = ROOT.joinpath(*parts[:depth], ".gitignore")
        if not gitignore.is_file():
            continue
        below = parts[depth:]
        for line in gitignore.read_text(encoding="utf-8").splitlines():
            pattern = line.strip()
            if not pattern or pattern.startswith(("#", "!")):
                continue
            anchored = "/" in pattern.strip("/") or pattern.startswith("/")
            pattern = pattern.strip("/")
            for end in range(1, len(below) + 1):  # the path or a folder it is in
                if anchored and fnmatch("/".join(below[:end]), pattern):
                    return True
                if not anchored and fnmatch(below[end - 1], pattern):
                    return True
    return False


def missing_paths(path: Path) -> list[str]:
    out = []
    for word in _code_words(path.read_text(encoding="utf-8")):
        word = word.removeprefix("./")
        if not word or not PATHLIKE.match(word):
            continue
        if "/" not in word:
            # A bare module or document name: a file of that name somewhere in the repository.
            if re.match(r"^[A-Za-z_][A-Za-z0-9_-]*\.(py|md)$", word) and word not in _file_names():
                out.append(f"`{word}`: no file of that name in the repository")
            continue
        roots = _roots(word)
        if roots and not any((root / word).exists() for root in roots) and not ignored(word):
            out.append(f"`{word}`: not in the repository")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_exists(doc: Path) -> None:
    assert sorted(set(missing_paths(doc))) == []


def test_slugs_are_githubs() -> None:
    assert slug("The paper's Table 1, measured here") == "the-papers-table-1-measured-here"
    assert slug("PostgreSQL targets (pgsql.py)") == "postgresql-targets-pgsqlpy"
    assert slug("The four DAGs (`dags/`)") == "the-four-dags-dags"
    assert slug("Incremental runs: `--since-last`") == "incremental-runs---since-last"
    assert slug("Zero, partial and invalid dates") == "zero-partial-and-invalid-dates"
