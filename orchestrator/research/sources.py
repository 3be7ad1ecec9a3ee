"""Where a corpus's documents come from, and how they are split into sections.

:mod:`.corpus` owns the index and the queries; this module owns the sources. The default
corpus reads the language reference topics (``pydoc_data/topics.py``) and the standard
library's docstrings with :mod:`ast`, importing nothing; a folder corpus reads Markdown,
reStructuredText-style text and HTML, split at their headings. Each source is described by a
:class:`Source` (its key, a signature that changes with its content, and a loader), so that the
index re-reads only what changed.
"""

from __future__ import annotations

import ast
import hashlib
import html.parser
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, NamedTuple

__all__ = [
    "FOLDER_SUFFIXES",
    "MAX_FILE_BYTES",
    "Section",
    "Source",
    "folder_sources",
    "stdlib_sources",
    "topic_sources",
]

#: File suffixes a folder corpus indexes.
FOLDER_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".html", ".htm"})
#: Files larger than this are skipped: they are data, not documents, and would drown the ranking.
MAX_FILE_BYTES = 8 * 1024 * 1024

# fmt: off
_STDLIB_SKIP_DIRS = frozenset({
    "test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip",
    "pydoc_data", "__pycache__", "site-packages", "dist-packages",
})
# fmt: on
# Private modules that hold the documentation of public APIs (decimal's docs live in _pydecimal).
_STDLIB_PRIVATE_KEPT = frozenset({"__future__", "_pydecimal", "_pyio", "_collections_abc"})


class Section(NamedTuple):
    """One indexed piece of a document: a whole document, or one of its headed sections."""

    id: str
    doc: str
    title: str  # shown to readers: "json.JSONDecoder", "Guide › Installation"
    heading: str  # indexed as the title: what this section itself is about ("JSONDecoder")
    body: str


@dataclass(frozen=True, slots=True)
class Source:
    """One file to index: its key in the ``sources`` table, its hash, and how to split it."""

    key: str
    signature: str
    load: Callable[[], list[Section]]


# -- the default corpus: reference topics and standard library docstrings ----------------------


def _stat_signature(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}"


def topic_sources(stdlib: Path) -> Iterator[Source | None]:
    """The language reference topics shipped with the interpreter, as one source."""
    path = stdlib / "pydoc_data" / "topics.py"
    signature = _stat_signature(path)
    if signature is not None:
        yield Source("topics:pydoc_data/topics.py", signature, lambda: _topic_sections(path))


def _topic_sections(path: Path) -> list[Section]:
    tree = ast.parse(path.read_bytes())
    topics: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "topics" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, dict):
                topics = {str(k): str(v) for k, v in value.items()}
    sections: list[Section] = []
    for key in sorted(topics):
        sections += _document_sections(f"topic:{key}", key, _split_underlined(topics[key]))
    return sections


def stdlib_sources(stdlib: Path) -> Iterator[Source | None]:
    """One source per standard library module (``None`` for a file that vanished meanwhile)."""
    for module, path in _stdlib_modules(stdlib):
        signature = _stat_signature(path)
        if signature is None:
            yield None
            continue
        yield Source(f"stdlib:{module}", signature, _loader(_stdlib_sections, module, path))


def _loader(
    split: Callable[[str, bytes], list[Section]], name: str, path: Path
) -> Callable[[], list[Section]]:
    return lambda: split(name, path.read_bytes())


def _stdlib_modules(stdlib: Path) -> Iterator[tuple[str, Path]]:
    """Yield (dotted module name, file) for the documented modules of the standard library."""
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(stdlib):
        here = Path(dirpath)
        package = here.relative_to(stdlib).parts
        dirnames[:] = sorted(
            name
            for name in dirnames
            if name.isidentifier()
            and name not in _STDLIB_SKIP_DIRS
            and (here / name / "__init__.py").is_file()
        )
        for filename in sorted(filenames):
            stem, _, suffix = filename.partition(".")
            if suffix != "py" or not stem.isidentifier() or stem == "__main__":
                continue
            parts = package if stem == "__init__" else (*package, stem)
            if not parts or any(p.startswith("_") and p not in _STDLIB_PRIVATE_KEPT for p in parts):
                continue
            module = ".".join(parts)
            if module not in seen:  # a module and a package of one name: the first wins
                seen.add(module)
                yield module, here / filename


def _stdlib_sections(module: str, source: bytes) -> list[Section]:
    with warnings.catch_warnings():  # old escapes in docstrings warn; they are not our concern
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    doc_id = f"stdlib:{module}"
    module_doc = ast.get_docstring(tree) or ""
    sections = [Section(doc_id, doc_id, module, module, f"Module {module}\n\n{module_doc}".strip())]
    seen: set[str] = set()
    for node in _top_level_definitions(tree.body):
        if node.name.startswith("_") or node.name in seen:
            continue
        text = _describe(node)
        if text is not None:
            seen.add(node.name)
            section_id, title = f"{doc_id}#{node.name}", f"{module}.{node.name}"
            sections.append(Section(section_id, doc_id, title, node.name, text))
    if not module_doc and len(sections) == 1:
        return []  # nothing documented: not worth a search result
    return sections


_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _top_level_definitions(body: Sequence[ast.stmt]) -> Iterator[_Definition]:
    """Definitions at module level, including those under ``if``/``try`` (platform variants)."""
    for node in body:
        if isinstance(node, _Definition):
            yield node
        elif isinstance(node, ast.If):
            yield from _top_level_definitions(node.body)
            yield from _top_level_definitions(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level_definitions(block)
            for handler in node.handlers:
                yield from _top_level_definitions(handler.body)


def _describe(node: _Definition) -> str | None:
    """Signature and docstring of a function, or of a class and its documented methods."""
    doc = ast.get_docstring(node) or ""
    if not isinstance(node, ast.ClassDef):
        return f"{node.name}({ast.unparse(node.args)})\n\n{doc}" if doc else None
    bases = ", ".join(ast.unparse(b) for b in (*node.bases, *node.keywords))
    parts = [f"class {node.name}({bases})\n\n{doc}".strip()]
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            private = item.name.startswith("_") and not item.name.endswith("__")
            method_doc = ast.get_docstring(item)
            if method_doc and not private:
                parts.append(f"{node.name}.{item.name}({ast.unparse(item.args)})\n{method_doc}")
    return "\n\n".join(parts) if doc or len(parts) > 1 else None


# -- folder corpora ------------------------------------------------------------------------------


def folder_sources(root: Path) -> Iterator[Source | None]:
    """One source per indexable file under ``root`` (``None`` for one that cannot be indexed:
    unreadable, too large, a symlink out of the root, a name that is not valid text, or a name a
    section id could shadow)."""
    for dirpath, dirnames, filenames in os.walk(root):  # directory symlinks are not followed
        here = Path(dirpath)
        dirnames[:] = sorted(
            name for name in dirnames if not name.startswith(".") and name != "node_modules"
        )
        for filename in sorted(filenames):
            path = here / filename
            if path.suffix.lower() not in FOLDER_SUFFIXES or filename.startswith("."):
                continue
            rel = path.relative_to(root).as_posix()
            if "#" in rel or "\\" in rel:
                yield None  # such a name could not be told apart from a section id
                continue
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 (e.g. a Latin-1 name)
                yield None
                continue
            try:
                if not path.resolve().is_relative_to(root) or not path.is_file():
                    yield None  # a symlink out of the root is never indexed
                    continue
                if path.stat().st_size > MAX_FILE_BYTES:
                    yield None
                    continue
                data = path.read_bytes()
            except (OSError, RuntimeError):
                yield None
                continue
            digest = hashlib.sha256(data).hexdigest()
            yield Source(rel, digest, _folder_loader(rel, path.suffix.lower(), data))


def _folder_loader(rel: str, suffix: str, data: bytes) -> Callable[[], list[Section]]:
    def load() -> list[Section]:
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").lstrip("\ufeff")
        fallback = PurePosixPath(rel).name
        if suffix in (".md", ".markdown"):
            return _document_sections(rel, fallback, _split_markdown(text))
        if suffix == ".rst":
            return _document_sections(rel, fallback, _split_underlined(text))
        if suffix in (".html", ".htm"):
            parser = _HtmlText()
            parser.feed(text)
            parser.close()
            return _document_sections(rel, fallback, parser.chunks(), title=parser.title)
        return _document_sections(rel, fallback, [(None, text)])

    return load


_Chunk = tuple[str | None, str]  # (heading, text including the heading); the first has no heading


def _document_sections(
    doc_id: str, fallback_title: str, chunks: list[_Chunk], *, title: str = ""
) -> list[Section]:
    """Turn heading-split chunks into one root row (the doc's id) and one row per section.

    When nothing precedes the first heading, that heading is the document's title and its text
    the root row; otherwise the text before it is.
    """
    _, preamble = chunks[0]
    rest = chunks[1:]
    if not preamble.strip() and rest:
        heading, root_text = rest[0]
        doc_title = title or heading or fallback_title
        rest = rest[1:]
    else:
        doc_title, root_text = title or fallback_title, preamble
    sections = [Section(doc_id, doc_id, doc_title, doc_title, root_text.strip())]
    used: set[str] = set()
    for heading, text in rest:
        base = _slug(heading or "") or "section"
        slug, n = base, 1
        while slug in used:
            n += 1
            slug = f"{base}-{n}"
        used.add(slug)
        title = f"{doc_title} › {heading}"
        sections.append(Section(f"{doc_id}#{slug}", doc_id, title, heading or "", text.strip()))
    return [part for section in sections for part in _parts(section)]


MAX_SECTION_CHARS: Final = 16_000
"""Longer sections are indexed in parts: FTS5's snippet() takes time growing with the square
of a word's occurrences in one row, so one 8 MB log with no headings stalled every search."""


def _parts(section: Section) -> list[Section]:
    """``section`` as parts of at most :data:`MAX_SECTION_CHARS`, cut between paragraphs where
    possible. The first keeps the id; the others are ``<id>~2``, ... (``<doc>#~2`` for a
    document's root): no heading's slug holds a ``~``, and reading the section reads them all."""
    body = section.body
    if len(body) <= MAX_SECTION_CHARS:
        return [section]
    pieces: list[str] = []
    while len(body) > MAX_SECTION_CHARS:
        cut = body.rfind("\n\n", 0, MAX_SECTION_CHARS)
        if cut <= 0:
            cut = body.rfind(" ", 0, MAX_SECTION_CHARS)
        if cut <= 0:
            cut = MAX_SECTION_CHARS
        pieces.append(body[:cut].strip())
        body = body[cut:].strip()
    pieces.append(body)
    anchor = section.id if "#" in section.id else f"{section.id}#"
    return [section._replace(body=pieces[0])] + [
        Section(f"{anchor}~{k}", section.doc, f"{section.title} (part {k})", section.heading, piece)
        for k, piece in enumerate(pieces[1:], start=2)
    ]


def _slug(heading: str) -> str:
    return re.sub(r"[^\w]+", "-", heading.lower()).strip("-")


_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_RST_UNDERLINE = re.compile(r"^([!-/:-@\[-`{-~])\1+[ \t]*$")


def _clean_heading(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [label](url) -> label
    return " ".join(text.replace("`", "").replace("**", "").split())


def _split_markdown(text: str) -> list[_Chunk]:
    """Split at ATX (``# x``) and setext (``x`` over ``===``) headings, outside code fences."""
    lines = text.split("\n")
    chunks: list[tuple[str | None, list[str]]] = [(None, [])]
    start = 0
    if lines and lines[0].strip() == "---":  # YAML front matter stays in the preamble
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), 0)
        chunks[0][1].extend(lines[: end + 1])
        start = end + 1
    fence = ""
    for i in range(start, len(lines)):
        line = lines[i]
        body = chunks[-1][1]
        opener = _FENCE.match(line)
        if fence:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence):
                fence = ""
        elif opener:
            fence = opener.group(1)
        elif atx := _ATX.match(line):
            chunks.append((_clean_heading(atx.group(2)), [line]))
            continue
        elif (
            _SETEXT.match(line)
            and body
            and body[-1].strip()
            and (len(body) == 1 or not body[-2].strip())
            and not _ATX.match(body[-1])
        ):
            heading = body.pop()
            chunks.append((_clean_heading(heading), [heading, line]))
            continue
        body.append(line)
    return [(heading, "\n".join(body)) for heading, body in chunks]


def _split_underlined(text: str) -> list[_Chunk]:
    """Split reStructuredText at section titles: a line underlined (optionally overlined) with
    one repeated punctuation character at least as long as the title."""
    lines = text.split("\n")
    chunks: list[tuple[str | None, list[str]]] = [(None, [])]
    i = 0
    while i < len(lines):
        line = lines[i]
        body = chunks[-1][1]
        title = line.strip()
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        underline = _RST_UNDERLINE.match(nxt)
        if (
            title
            and not line[0].isspace()
            and not _RST_UNDERLINE.match(line)
            and underline
            and len(nxt.rstrip()) >= len(title)
        ):
            overline = body and body[-1].rstrip() == nxt.rstrip()
            if overline:
                body.pop()
            previous = body[-1] if body else ""
            if not previous.strip():
                head = [nxt, line, nxt] if overline else [line, nxt]
                chunks.append((title, head))
                i += 2
                continue
            if overline:
                body.append(nxt)
        body.append(line)
        i += 1
    return [(heading, "\n".join(body)) for heading, body in chunks]


class _HtmlText(html.parser.HTMLParser):
    """HTML to plain text, split at ``<h1>``-``<h6>``; scripts and styles are dropped."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
    # fmt: off
    _BLOCK = frozenset({
        "p", "div", "br", "li", "tr", "pre", "section", "article", "header", "footer", "nav",
        "ul", "ol", "table", "blockquote", "dt", "dd", "hr", "main", "aside", "figure", "td",
        "th", "dl", "form", "address", "details", "summary", "caption",
    })
    # fmt: on

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self._chunks: list[tuple[str | None, list[str]]] = [(None, [])]
        self._skip = 0
        self._in_title = False
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self._SKIP:
            self._skip += 1
        elif tag in self._HEADINGS:
            self._heading = []
        elif tag in self._BLOCK:
            self._chunks[-1][1].append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self._HEADINGS and self._heading is not None:
            heading = " ".join("".join(self._heading).split())
            self._heading = None
            if heading:
                self._chunks.append((heading, [heading, "\n\n"]))
        elif tag in self._BLOCK:
            self._chunks[-1][1].append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = " ".join((self.title + " " + data).split())
        elif self._skip:
            return
        elif self._heading is not None:
            self._heading.append(data)
        else:
            self._chunks[-1][1].append(data)

    def chunks(self) -> list[_Chunk]:
        """The text of each heading's part, whitespace tidied line by line."""
        if self._heading:  # an unclosed heading at the end of the file: keep its text
            self._chunks[-1][1].extend(self._heading)
            self._heading = None
        out: list[_Chunk] = []
        for heading, parts in self._chunks:
            lines = (" ".join(line.split()) for line in "".join(parts).split("\n"))
            text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
            out.append((heading, text))
        return out
