"""The research corpus: ranked search, section reads, incremental indexing and the read sandbox.

Folder corpora are built from small files written into ``tmp_path``; the default corpus (the
interpreter's reference topics and standard library docstrings) is built once per module into a
temporary index and shared, since building it parses a few hundred standard library files.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core.errors import OrchestratorError
from orchestrator.research import corpus as corpus_module
from orchestrator.research.corpus import Corpus, CorpusError, Document, SearchHit
from orchestrator.research.sources import MAX_SECTION_CHARS

INTRO_MD = """\
# Getting started

Widgetron turns spreadsheets into dashboards.

## Installation

Run `pip install widgetron` inside a virtual environment.

```
# this is a comment in a code block, not a heading
```

## Configuration

Put a widgetron.toml next to your data. The theme option picks colours.

Advanced usage
--------------

Plugins register renderers with the registry.
"""

SOURDOUGH_MD = """\
# Sourdough bread

A sourdough starter is a culture of wild yeast and lactic bacteria. Feed the starter with flour
and water every day; bake the bread when the starter doubles after feeding.
"""

TELESCOPES_MD = """\
# Telescopes

Refracting telescopes use lenses; reflecting telescopes use mirrors. Aperture decides how much
light a telescope gathers.
"""

GARDEN_TXT = """\
Notes on gardening. Tomatoes need sun. A neighbour once pointed a telescope at the moon from the
garden, but this note is about compost, mulch, watering schedules, pruning, seedlings, raised
beds, crop rotation, slugs, and the many other chores a vegetable garden asks for every week.
"""

API_RST = """\
=========
API guide
=========

The API has two calls.

Fetching
========

``fetch(url)`` downloads a page and returns its bytes.

Parsing
-------

``parse(data)`` turns bytes into a tree.
"""

PAGE_HTML = """\
<!doctype html>
<html><head><title>Kite flying handbook</title>
<style>body { color: red }</style></head>
<body>
<script>var secretTracker = "do not index me";</script>
<p>Kites need <b>steady wind</b> &amp; open fields.</p>
<h2>Launching</h2>
<p>Let the line out slowly while the kite climbs.</p>
<h2>Landing</h2>
<p>Walk towards the kite while winding the line.</p>
</body></html>
"""

FILES = {
    "guide/intro.md": INTRO_MD,
    "food/sourdough.md": SOURDOUGH_MD,
    "sky/telescopes.md": TELESCOPES_MD,
    "garden.txt": GARDEN_TXT,
    "ref/api.rst": API_RST,
    "web/kites.html": PAGE_HTML,
    "code/script.py": "print('not a document')\n",
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "docs", FILES)


@pytest.fixture
def corpus(docs: Path, tmp_path: Path) -> Iterator[Corpus]:
    with Corpus.open(docs, index_path=tmp_path / "index.sqlite") as opened:
        yield opened


@pytest.fixture(scope="module")
def shared_folder_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    base = tmp_path_factory.mktemp("shared")
    with Corpus.open(write_tree(base / "docs", FILES), index_path=base / "i.sqlite") as opened:
        yield opened


@pytest.fixture(scope="module")
def python_docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """The default corpus, built once; the build must import no module to read docstrings."""
    index = tmp_path_factory.mktemp("python-docs") / "index.sqlite"
    before = set(sys.modules)
    started = time.perf_counter()
    opened = Corpus.open(index_path=index)
    built = time.perf_counter() - started
    imported = set(sys.modules) - before
    assert not imported, f"building the default corpus imported {sorted(imported)}"
    assert opened.last_refresh.added > 300
    print(f"default corpus built in {built:.2f}s: {opened.last_refresh}")
    with opened:
        yield opened


def ids(hits: list[SearchHit]) -> list[str]:
    return [hit.id for hit in hits]


# -- search ---------------------------------------------------------------------------------------


def test_a_document_about_a_subject_ranks_first_for_that_subject(corpus: Corpus) -> None:
    assert ids(corpus.search("sourdough starter feeding"))[0] == "food/sourdough.md"
    assert ids(corpus.search("kite launching"))[0] == "web/kites.html#launching"
    assert ids(corpus.search("install widgetron with pip"))[0] == "guide/intro.md#installation"


def test_a_title_match_outranks_a_passing_mention_in_a_longer_body(corpus: Corpus) -> None:
    hits = ids(corpus.search("telescope"))
    assert hits[0] == "sky/telescopes.md"
    assert "garden.txt" in hits


def test_snippets_show_the_matched_terms_highlighted(corpus: Corpus) -> None:
    hit = corpus.search("wild yeast")[0]
    assert hit.id == "food/sourdough.md"
    highlighted = " ".join(re.findall(r"\*\*(.+?)\*\*", hit.snippet)).lower()
    assert "wild" in highlighted and "yeast" in highlighted
    assert hit.title == "Sourdough bread"
    assert hit.score > 0


def test_words_match_by_stem_and_case(corpus: Corpus) -> None:
    assert ids(corpus.search("REFRACTING Telescope lens"))[0] == "sky/telescopes.md"


def test_stopwords_are_dropped_unless_they_are_all_the_query_has(corpus: Corpus) -> None:
    assert ids(corpus.search("what is the aperture of a telescope"))[0] == "sky/telescopes.md"
    assert corpus.search("the") != []  # a query of stopwords still searches for them


def test_limit_caps_the_number_of_hits(corpus: Corpus) -> None:
    assert len(corpus.search("the", limit=2)) == 2
    with pytest.raises(CorpusError, match="limit"):
        corpus.search("kites", limit=0)


@pytest.mark.parametrize(
    "query",
    [
        'foo"bar',
        '"unterminated',
        "AND OR NOT",
        "NEAR(kite wind, 2)",
        "(((kite",
        "kite*",
        "title:kite",
        "-wind +kite ^launch",
        "c++ && || !",
        "what's a kite?!",
        "*",
        "",
        "   ",
        "🙂 ünïcödé",
        "a\x00b",
        "kite " * 500,
    ],
)
def test_punctuation_and_fts_syntax_in_a_query_never_raise(
    shared_folder_corpus: Corpus, query: str
) -> None:
    hits = shared_folder_corpus.search(query)
    assert isinstance(hits, list)


@settings(max_examples=200, deadline=None)
@given(query=st.text())
def test_any_text_at_all_is_a_valid_query(shared_folder_corpus: Corpus, query: str) -> None:
    shared_folder_corpus.search(query)


def test_a_query_without_words_returns_no_hits(corpus: Corpus) -> None:
    assert corpus.search("?! ... ***") == []


# -- read -----------------------------------------------------------------------------------------


def test_reading_a_section_returns_only_that_section(corpus: Corpus) -> None:
    section = corpus.read("guide/intro.md#installation")
    assert isinstance(section, Document)
    assert section.title == "Getting started › Installation"
    assert "pip install widgetron" in section.text
    assert "theme option" not in section.text
    assert section.sections == ()


def test_reading_a_document_returns_all_of_it_and_lists_its_sections(corpus: Corpus) -> None:
    doc = corpus.read("guide/intro.md")
    assert doc.title == "Getting started"
    assert "Widgetron turns spreadsheets" in doc.text and "Plugins register" in doc.text
    # A '#' line inside a code fence is not a heading; a setext underline is.
    assert doc.sections == (
        "guide/intro.md#installation",
        "guide/intro.md#configuration",
        "guide/intro.md#advanced-usage",
    )


def test_rst_titles_split_sections_and_the_overlined_title_names_the_document(
    corpus: Corpus,
) -> None:
    doc = corpus.read("ref/api.rst")
    assert doc.title == "API guide"
    assert doc.sections == ("ref/api.rst#fetching", "ref/api.rst#parsing")
    assert "turns bytes into a tree" in corpus.read("ref/api.rst#parsing").text


def test_html_is_read_as_text_split_at_headings_without_scripts_or_styles(corpus: Corpus) -> None:
    doc = corpus.read("web/kites.html")
    assert doc.title == "Kite flying handbook"
    assert "Kites need steady wind & open fields." in doc.text
    assert "<" not in doc.text and "secretTracker" not in doc.text and "color" not in doc.text
    assert doc.sections == ("web/kites.html#launching", "web/kites.html#landing")
    assert corpus.search("secretTracker") == []


def test_plain_text_files_are_one_section_named_after_the_file(corpus: Corpus) -> None:
    doc = corpus.read("garden.txt")
    assert doc.title == "garden.txt" and doc.sections == ()
    assert "compost" in doc.text


def test_max_chars_truncates_the_text_and_says_so(corpus: Corpus) -> None:
    doc = corpus.read("guide/intro.md", max_chars=20)
    assert len(doc.text) == 20 and doc.truncated and doc.total_chars > 20
    assert not corpus.read("guide/intro.md").truncated


def test_equivalent_spellings_of_a_path_read_the_same_document(corpus: Corpus) -> None:
    assert corpus.read("./guide//intro.md").text == corpus.read("guide/intro.md").text


def test_an_unknown_id_is_a_clear_error_that_points_to_search(corpus: Corpus) -> None:
    with pytest.raises(CorpusError, match="use search"):
        corpus.read("guide/nothing-here.md")


def test_an_unknown_section_lists_the_sections_the_document_has(corpus: Corpus) -> None:
    with pytest.raises(CorpusError, match=r"no section 'setup'.*guide/intro.md#installation"):
        corpus.read("guide/intro.md#setup")


def test_a_file_of_another_kind_is_not_part_of_the_corpus(corpus: Corpus) -> None:
    with pytest.raises(CorpusError, match=r"only .* files are indexed"):
        corpus.read("code/script.py")
    assert all(not hit.id.startswith("code/") for hit in corpus.search("print document"))


def test_corpus_errors_are_orchestrator_errors() -> None:
    assert issubclass(CorpusError, OrchestratorError)


# -- sandbox --------------------------------------------------------------------------------------


@pytest.fixture
def escape_corpus(tmp_path: Path) -> Iterator[Corpus]:
    """A corpus whose root holds symlinks to a file and a folder outside it."""
    outside = write_tree(tmp_path / "outside", {"secret.md": "# Secret\n\nlaunch codes zebra\n"})
    root = write_tree(tmp_path / "root", {"ok.md": "# Fine\n\nnothing to see\n"})
    (root / "leak.md").symlink_to(outside / "secret.md")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "inside.md").symlink_to(root / "ok.md")
    with Corpus.open(root, index_path=tmp_path / "index.sqlite") as opened:
        yield opened


@pytest.mark.parametrize(
    ("doc_id", "reason"),
    [
        ("../outside/secret.md", r"'\.\.'"),
        ("ok/../../outside/secret.md", r"'\.\.'"),
        ("..\\outside\\secret.md", r"'\.\.'"),
        ("/etc/passwd", "absolute"),
        ("\\\\server\\share\\x.md", "absolute"),
        ("C:\\Windows\\win.ini", "absolute"),
        ("leak.md", "outside the corpus root through a symlink"),
        ("leak.md#secret", "outside the corpus root through a symlink"),
        ("linked/secret.md", "outside the corpus root through a symlink"),
        ("ok.md\x00.png", "NUL"),
    ],
)
def test_ids_that_would_leave_the_root_are_refused_with_the_reason(
    escape_corpus: Corpus, doc_id: str, reason: str
) -> None:
    with pytest.raises(CorpusError, match=reason):
        escape_corpus.read(doc_id)


@pytest.mark.parametrize("bad", ["ok.md#\ud800", "\udcff.md"])
def test_an_id_holding_a_lone_surrogate_is_refused_as_not_text(
    escape_corpus: Corpus, bad: str
) -> None:
    with pytest.raises(CorpusError, match="lone surrogate"):
        escape_corpus.read(bad)
    with pytest.raises(CorpusError, match="lone surrogate"):
        escape_corpus.search(f"launch {bad}")


def test_an_absolute_path_is_refused_even_when_it_points_inside_the_root(
    escape_corpus: Corpus,
) -> None:
    root = escape_corpus.root
    assert root is not None
    with pytest.raises(CorpusError, match="absolute"):
        escape_corpus.read(str(root / "ok.md"))


def test_symlinks_that_escape_the_root_are_never_indexed(escape_corpus: Corpus) -> None:
    assert escape_corpus.search("launch codes zebra") == []
    assert escape_corpus.last_refresh.skipped == 1  # leak.md; linked/ is not followed at all


def test_a_file_whose_name_is_not_utf8_is_skipped_and_the_rest_is_indexed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Lambda\n\nlambda expressions create anonymous functions\n")
    with open(os.fsencode(docs) + b"/old-\xff.md", "wb") as f:  # a Latin-1 name, say
        f.write(b"# Old\n\nlambda in an old archive\n")
    corpus = Corpus.open(docs, index_path=tmp_path / "index.sqlite")
    assert [hit.id for hit in corpus.search("lambda")] == ["good.md"]
    assert corpus.last_refresh.skipped == 1


def test_a_long_document_without_headings_is_indexed_in_parts_each_readable(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    paragraphs = [f"paragraph {i}: " + "log line about lambda " * 60 for i in range(200)]
    (docs / "big.txt").write_text("\n\n".join(paragraphs))
    corpus = Corpus.open(docs, index_path=tmp_path / "index.sqlite")
    whole = corpus.read("big.txt")
    assert [p.split(":")[0] for p in whole.text.split("\n\n")] == [
        f"paragraph {i}" for i in range(200)
    ]
    assert len(whole.sections) > 1
    for section in whole.sections:
        part = corpus.read(section)
        assert len(part.text) <= MAX_SECTION_CHARS
    hits = corpus.search("lambda", limit=3)
    assert hits and all(corpus.read(hit.id).text for hit in hits)


def test_reading_a_long_sections_id_reads_every_part_of_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    paragraphs = [f"step {i}: " + "install the package and check it " * 30 for i in range(60)]
    body = "\n\n".join(paragraphs)
    (docs / "guide.md").write_text(
        f"# Guide\n\nIntro.\n\n## Setup\n\n{body}\n\n## Use\n\nRun it.\n"
    )
    corpus = Corpus.open(docs, index_path=tmp_path / "index.sqlite")
    setup = corpus.read("guide.md#setup")
    assert not setup.truncated
    assert [p.split(":")[0] for p in setup.text.split("\n\n")[1:]] == [
        f"step {i}" for i in range(60)
    ]
    assert setup.sections and all(part.startswith("guide.md#setup~") for part in setup.sections)
    for part in setup.sections:
        assert len(corpus.read(part).text) <= MAX_SECTION_CHARS
    assert corpus.read("guide.md#use").text.endswith("Run it.")


def test_a_symlink_that_stays_inside_the_root_is_an_ordinary_document(
    escape_corpus: Corpus,
) -> None:
    assert escape_corpus.read("inside.md").text == escape_corpus.read("ok.md").text


# -- incremental indexing -------------------------------------------------------------------------


def reopen(docs: Path, tmp_path: Path) -> Corpus:
    return Corpus.open(docs, index_path=tmp_path / "index.sqlite")


def test_a_first_open_indexes_every_document_file(corpus: Corpus) -> None:
    stats = corpus.last_refresh
    assert (stats.added, stats.updated, stats.removed, stats.unchanged) == (6, 0, 0, 0)
    assert stats.sections == 13  # one row per document plus one per section


def test_reopening_an_unchanged_corpus_does_no_work(docs: Path, tmp_path: Path) -> None:
    reopen(docs, tmp_path).close()
    with reopen(docs, tmp_path) as again:
        assert again.last_refresh.changed == 0
        assert again.last_refresh.unchanged == 6


def test_changing_one_file_reindexes_only_that_file(docs: Path, tmp_path: Path) -> None:
    reopen(docs, tmp_path).close()
    path = docs / "sky/telescopes.md"
    before = path.stat()
    # Same size and same mtime: only the content hash can tell the file changed.
    path.write_text(TELESCOPES_MD.replace("lenses", "prisms"), encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    with reopen(docs, tmp_path) as again:
        stats = again.last_refresh
        assert (stats.added, stats.updated, stats.removed, stats.unchanged) == (0, 1, 0, 5)
        assert ids(again.search("prisms"))[0] == "sky/telescopes.md"
        assert again.search("lenses") == []


def test_deleting_a_file_removes_it_from_search_and_read(docs: Path, tmp_path: Path) -> None:
    reopen(docs, tmp_path).close()
    (docs / "food/sourdough.md").unlink()
    with reopen(docs, tmp_path) as again:
        assert again.last_refresh.removed == 1 and again.last_refresh.unchanged == 5
        assert again.search("sourdough") == []
        with pytest.raises(CorpusError, match="use search"):
            again.read("food/sourdough.md")


def test_refresh_picks_up_a_new_file_and_reports_an_unindexed_one(
    corpus: Corpus, docs: Path
) -> None:
    write_tree(docs, {"sky/comets.md": "# Comets\n\nA comet has a tail of gas and dust.\n"})
    with pytest.raises(CorpusError, match="not indexed yet"):
        corpus.read("sky/comets.md")
    stats = corpus.refresh()
    assert (stats.added, stats.unchanged) == (1, 6)
    assert ids(corpus.search("comet tail"))[0] == "sky/comets.md"


def test_an_index_built_for_another_root_is_rebuilt(tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    first = write_tree(tmp_path / "a", {"one.md": "# One\n\nalpha\n"})
    second = write_tree(tmp_path / "b", {"two.md": "# Two\n\nbeta\n"})
    Corpus.open(first, index_path=index).close()
    with Corpus.open(second, index_path=index) as other:
        assert other.search("alpha") == []
        assert ids(other.search("beta")) == ["two.md"]


def test_a_database_this_module_did_not_write_is_refused_and_left_alone(tmp_path: Path) -> None:
    index = tmp_path / "precious.sqlite"
    with sqlite3.connect(index) as conn:
        conn.execute("CREATE TABLE precious(x)")
    conn.close()
    with pytest.raises(CorpusError, match="did not write"):
        Corpus.open(write_tree(tmp_path / "d", {"a.md": "a"}), index_path=index)
    with sqlite3.connect(index) as conn:
        assert conn.execute("SELECT count(*) FROM precious").fetchone() == (0,)
    conn.close()


def test_a_corrupt_index_file_is_a_clear_error(tmp_path: Path) -> None:
    index = tmp_path / "index.sqlite"
    index.write_bytes(b"this is not a database, just bytes" * 200)
    with pytest.raises(CorpusError, match="not a readable corpus index"):
        Corpus.open(write_tree(tmp_path / "d", {"a.md": "a"}), index_path=index)


def test_several_openers_building_one_index_at_once_all_succeed(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "shared.sqlite"
    barrier = threading.Barrier(4)

    def open_and_search(_: int) -> list[str]:
        barrier.wait()
        with Corpus.open(docs, index_path=index) as opened:
            return ids(opened.search("sourdough"))

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(open_and_search, range(4)))
    assert all(result[:1] == ["food/sourdough.md"] for result in results)
    with Corpus.open(docs, index_path=index) as again:
        assert again.last_refresh.changed == 0 and again.last_refresh.sections == 13


def test_a_refresh_by_another_opener_never_shows_half_of_each_index(tmp_path: Path) -> None:
    # search ranks then fetches snippets, read finds an id then its rows: a refresh committed
    # in between raised KeyError / IndexError instead of answering from one index or the other
    root = tmp_path / "docs"
    root.mkdir()

    def write(version: int) -> None:
        for i in range(40):
            (root / f"f{i:02d}.md").write_text(f"# Doc {i}\n\nzebra text {i} v{version}\n")

    write(0)
    index = tmp_path / "index.sqlite"
    writer, reader = Corpus.open(root, index_path=index), Corpus.open(root, index_path=index)
    failures: list[str] = []

    def keep_refreshing() -> None:  # a count, not a duration: as many refreshes under load
        for version in range(1, 16):
            write(version)
            writer.refresh()

    thread = threading.Thread(target=keep_refreshing)
    thread.start()
    try:
        while thread.is_alive():
            try:
                reader.search("zebra", limit=5)
                reader.read("f01.md")
            except CorpusError:
                pass  # a document caught between versions: a clear answer either way
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
    finally:
        thread.join()
        writer.close()
        reader.close()
    assert failures == []


def test_reading_a_file_too_large_to_index_says_so(tmp_path: Path) -> None:
    # it said "not indexed yet (newer than the index): refresh the corpus", which never helps
    root = tmp_path / "docs"
    root.mkdir()
    (root / "small.md").write_text("# Small\n\nfine\n")
    (root / "big.md").write_text("# Big\n\n" + "word " * (2 * 1024 * 1024))  # 10 MiB
    corpus = Corpus.open(root, index_path=tmp_path / "index.sqlite")
    with corpus, pytest.raises(CorpusError, match="over 8 MiB are not indexed"):
        corpus.read("big.md")


def test_the_default_index_lives_under_the_xdg_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with Corpus.open(write_tree(tmp_path / "d", {"a.md": "# A\n"})) as opened:
        assert opened.index_path.parent == tmp_path / "cache" / "orchestrator"
        assert opened.index_path.name.startswith("corpus-")


def test_a_root_that_is_not_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="not a directory"):
        Corpus.open(tmp_path / "missing", index_path=tmp_path / "i.sqlite")


def test_a_sqlite_without_fts5_is_reported_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stand in for a SQLite built without FTS5: the probe names a module SQLite does not have.
    monkeypatch.setattr(
        corpus_module, "_FTS5_PROBE", "CREATE VIRTUAL TABLE temp.p USING no_such_fts(x)"
    )
    with pytest.raises(CorpusError, match="without the FTS5 full-text extension"):
        Corpus.open(tmp_path, index_path=tmp_path / "i.sqlite")


def test_searches_and_reads_from_many_threads_at_once_agree(shared_folder_corpus: Corpus) -> None:
    expected = ids(shared_folder_corpus.search("kite wind"))
    barrier = threading.Barrier(8)

    def work(_: int) -> bool:
        barrier.wait()
        results = [ids(shared_folder_corpus.search("kite wind")) for _ in range(30)]
        text = shared_folder_corpus.read("web/kites.html#landing").text
        return all(r == expected for r in results) and "winding" in text

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(8)))


# -- the default corpus ---------------------------------------------------------------------------


def test_the_default_corpus_holds_reference_topics_and_stdlib_docstrings(
    python_docs: Corpus,
) -> None:
    assert "for_stmt" in python_docs.read("topic:for").text
    json_doc = python_docs.read("stdlib:json")
    assert json_doc.title == "json"
    assert "JavaScript Object Notation" in json_doc.text
    assert "stdlib:json#loads" in json_doc.sections
    loads = python_docs.read("stdlib:json#loads")
    assert loads.title == "json.loads" and loads.text.startswith("loads(s, *")
    decoder = python_docs.read("stdlib:json.decoder#JSONDecoder")
    assert decoder.text.startswith("class JSONDecoder(object)")
    assert "JSONDecoder.decode(self, s" in decoder.text  # documented methods are included


def test_json_decode_finds_the_json_module_in_the_top_three(python_docs: Corpus) -> None:
    top = ids(python_docs.search("json decode"))[:3]
    assert any(i == "stdlib:json" or i.startswith("stdlib:json#") for i in top), top


def test_language_questions_find_the_reference_topics(python_docs: Corpus) -> None:
    assert "topic:with" in ids(python_docs.search("with statement"))
    assert "topic:for" in ids(python_docs.search("for loop"))


def test_large_topics_are_split_into_sections(python_docs: Corpus) -> None:
    doc = python_docs.read("topic:specialnames")
    assert "topic:specialnames#basic-customization" in doc.sections
    assert "__init__" in python_docs.read("topic:specialnames#basic-customization").text


def test_tests_idle_tkinter_and_private_modules_are_left_out(python_docs: Corpus) -> None:
    for doc_id in ("stdlib:test.support", "stdlib:idlelib", "stdlib:tkinter", "stdlib:_strptime"):
        with pytest.raises(CorpusError):
            python_docs.read(doc_id)
    assert python_docs.read("stdlib:_pydecimal").text  # private, but holds decimal's docs
    for hit in python_docs.search("tkinter widget test case idle", limit=50):
        assert not hit.id.startswith(("stdlib:test.", "stdlib:tkinter", "stdlib:idlelib")), hit


def test_an_id_without_its_prefix_suggests_the_right_one(python_docs: Corpus) -> None:
    with pytest.raises(CorpusError, match="did you mean 'stdlib:json'"):
        python_docs.read("json")


def test_reopening_the_default_corpus_does_no_work(python_docs: Corpus) -> None:
    # how fast that is (and the build) is a figure, not a test: bench_corpus.py reports it
    with Corpus.open(index_path=python_docs.index_path) as again:
        assert again.last_refresh.changed == 0
        assert again.last_refresh.unchanged == python_docs.last_refresh.added
