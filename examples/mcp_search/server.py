"""A small MCP search server over a folder of notes: one tool, ``search``.

    python examples/mcp_search/server.py [FOLDER]      # default: the notes/ folder beside it

It speaks MCP over stdio (the ``mcp`` SDK's own server; ``pip install 'orchestrator[mcp]'``).
``search`` takes ``{"query": str}`` and returns the paragraphs of the folder's ``.md`` and
``.txt`` files that hold the most of the query's words, best first, each on a line of its own
after the file name it came from: ``[style-guide.md] List comprehensions ...``. An agent given
it as ``notes`` sees the tool as ``notes__search``:

    orchestrator run agents/research.py \\
        --mcp researcher:notes="python examples/mcp_search/server.py" \\
        "How do list comprehensions work?"

docs/mcp.md shows what that changes in the offline answer.
"""

import re
import sys
from pathlib import Path

HITS = 5
"""Passages a search returns at most."""
_WORD = re.compile(r"[^\W_]+")
_SMALL = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "how", "in", "is"}
    | {"it", "of", "on", "or", "the", "to", "what", "when", "which", "why", "with"}
)


def words(text: str) -> set[str]:
    """The text's words, lower case, plurals folded (``comprehensions`` is ``comprehension``),
    small words left out."""
    out = set()
    for w in _WORD.findall(text.lower()):
        if w in _SMALL:
            continue
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def passages(folder: Path) -> list[tuple[str, str]]:
    """(file name, paragraph) of every prose paragraph of the folder's notes, in name order
    (headings left out; a paragraph's lines joined into one)."""
    out = []
    for path in sorted(folder.rglob("*")):
        if path.suffix not in (".md", ".txt") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for block in re.split(r"\n\s*\n", text):
            para = " ".join(block.split())
            if para and not para.startswith("#"):
                out.append((path.relative_to(folder).as_posix(), para))
    return out


def search_notes(folder: Path, query: str) -> str:
    """The best passages for ``query``: ``[file] passage`` lines, a blank line apart."""
    asked = words(query)
    scored = []
    for order, (name, para) in enumerate(passages(folder)):
        shared = len(asked & (words(para) | words(name)))
        if shared:
            scored.append((-shared, order, name, para))
    if not scored:
        return f"No passage of the notes matches: {query}"
    return "\n\n".join(f"[{name}] {para}" for _, _, name, para in sorted(scored)[:HITS])


def main() -> None:
    from mcp.server import MCPServer

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "notes")
    if not folder.is_dir():
        sys.exit(f"no such folder: {folder}")
    server = MCPServer("notes")

    @server.tool()
    def search(query: str) -> str:
        """Search the team's notes: the passages that hold the most of the query's words, each
        after the file it comes from, like [style-guide.md] passage.

        Args:
            query: a few keywords
        """
        return search_notes(folder, query)

    server.run("stdio")


if __name__ == "__main__":
    main()
