"""Query sets for the demo, built by code at run time (like :mod:`latechunk_dagster.app.demo_corpus`).

1. **Context-dependent set** (:func:`context_set`): generated documents about invented entities
   (companies, towns, researchers, ships). Each entity is named once, in the first sentence; later
   sentences refer back to it ("It", "The firm", "Her"). Queries name the entity and ask for a
   later fact, so the relevant sentence does not contain the name: a chunk embedded alone cannot
   tell which entity it is about, a late chunk can. Deterministic (``random.Random(seed)``).
2. **Standard-library set** (:data:`STDLIB_QUERIES`, :func:`stdlib_queries`): queries written by
   hand for the demo corpus; the relevant passage of each is the docstring section that answers
   it (from its header line ``Function gzip.compress():`` to the next header, or the module
   docstring before the first header). Char ranges are found in the built documents at run time;
   a section that is not there raises (a Python whose docstrings differ).

:func:`run_demo_evaluation` evaluates the first on the demo's granularities
(:func:`demo_granularities`) and returns the printed text;
:func:`write_stdlib_queries` writes the second as the query file of the demo table's
``retrieval_eval`` asset, which ``make demo`` materializes.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latechunk_dagster.evaluation.queries import LabeledQuery, Passage
from latechunk_dagster.sources.files import Document, DocumentStore

# ----------------------------------------------------------------------------- 1. generated set

_SYLLABLES = ["va", "lor", "mi", "tes", "qu", "ren", "dal", "ok", "bri", "san", "tu", "vel", "mar", "on", "zi", "per"]
_CITIES = ["Tarnow", "Lisbon", "Ghent", "Kaunas", "Bergen", "Porto", "Graz", "Aarhus", "Split", "Leeds", "Turku"]


@dataclass(frozen=True)
class _Kind:
    """A document template: the naming sentence, then facts that refer back, each with its question."""

    name: str
    opening: str
    facts: tuple[tuple[str, str, tuple[str, ...]], ...]  # (sentence with {v}, question with {name}, values)


_KINDS = (
    _Kind(
        "company",
        "{name} is an engineering company that was founded in {city} in {year} by a group of former railway engineers.",
        (
            (
                "The firm's main product is {v}.",
                "What is the main product of {name}?",
                (
                    "a hydraulic pump for fire engines",
                    "a solar water heater",
                    "a quiet ventilation fan",
                    "a sensor for bridge cables",
                    "a compact grain dryer",
                    "a marine bilge alarm",
                ),
            ),
            (
                "Its largest customer is {v}.",
                "Who is the largest customer of {name}?",
                (
                    "a dairy cooperative",
                    "the national railway",
                    "a chain of bakeries",
                    "a hospital group",
                    "an airport operator",
                    "a shipyard in the north",
                ),
            ),
            (
                "Last year it opened a second factory in {v}.",
                "Where did {name} open its second factory?",
                tuple(_CITIES),
            ),
            (
                "Most of its {v} employees work in the assembly halls.",
                "How many people work for {name}?",
                ("120", "340", "85", "910", "57", "260"),
            ),
            (
                "The company pays for night classes in {v} for its apprentices.",
                "Which night classes does {name} pay for?",
                ("welding", "technical drawing", "German", "accounting", "electronics"),
            ),
            (
                "A fire in its paint shop once stopped production for {v}.",
                "How long did the fire stop production at {name}?",
                ("three weeks", "two months", "ten days", "half a year"),
            ),
        ),
    ),
    _Kind(
        "town",
        "{name} is a small town in the river valley east of {city}, first mentioned in a charter of {year}.",
        (
            (
                "Its mayor is {v}.",
                "Who is the mayor of {name}?",
                ("a retired teacher", "a former fisherman", "a young architect", "a veterinarian", "a baker"),
            ),
            (
                "The town is best known for {v}.",
                "What is {name} known for?",
                ("its smoked cheese", "a wooden clock tower", "glass beads", "a spring horse fair", "violin makers"),
            ),
            (
                "Every summer it hosts {v}.",
                "Which festival takes place in {name} each summer?",
                (
                    "a kite festival",
                    "a brass band contest",
                    "an open-air cinema week",
                    "a rowing regatta",
                    "a chess tournament",
                ),
            ),
            (
                "Its oldest building is {v}.",
                "What is the oldest building in {name}?",
                ("a mill from the twelfth century", "a timber-framed inn", "a round chapel", "a customs house"),
            ),
            (
                "The local football club plays in {v}.",
                "What colours does the football club of {name} play in?",
                ("green and white", "red and black", "blue stripes", "yellow shirts"),
            ),
            (
                "Its old stone bridge was rebuilt after {v}.",
                "Why was the bridge of {name} rebuilt?",
                ("the flood of 1954", "a fire in 1911", "an earthquake", "a collapse under a heavy truck"),
            ),
        ),
    ),
    _Kind(
        "researcher",
        "{name} was a chemist born in {city} in {year} who spent most of her career studying crystals.",
        (
            (
                "She is best remembered for {v}.",
                "What is {name} best remembered for?",
                (
                    "a cheap test for lead in water",
                    "a new kind of glue",
                    "the first stable blue pigment",
                    "a method to grow large salt crystals",
                    "a battery that works in frost",
                ),
            ),
            (
                "Her first laboratory was {v}.",
                "Where was the first laboratory of {name}?",
                ("a converted stable", "the attic of a pharmacy", "a rented boat shed", "a school cellar"),
            ),
            ("Later she taught at the university of {v}.", "At which university did {name} teach?", tuple(_CITIES)),
            (
                "Her notebooks are kept in {v}.",
                "Where are the notebooks of {name} kept?",
                ("the city archive", "a museum of science", "a monastery library", "her family's house"),
            ),
            (
                "Her closest collaborator was {v}.",
                "Who was the closest collaborator of {name}?",
                ("her younger brother", "a Danish physicist", "a glassblower", "a former student"),
            ),
            (
                "In old age she wrote {v}.",
                "What did {name} write in old age?",
                ("a cookbook", "a book of poems", "a history of alchemy", "letters to schoolchildren"),
            ),
        ),
    ),
    _Kind(
        "ship",
        "The {name} is a cargo ship that was launched at a shipyard near {city} in {year} for a family firm.",
        (
            (
                "It mostly carries {v}.",
                "What cargo does the {name} carry?",
                ("timber", "frozen fish", "paper rolls", "wind turbine blades", "grain", "cars"),
            ),
            (
                "Its captain is {v}.",
                "Who is the captain of the {name}?",
                ("a woman from the islands", "the owner's grandson", "a former navy officer", "a veteran pilot"),
            ),
            (
                "The vessel sails between {v}.",
                "Which ports does the {name} sail between?",
                ("Riga and Hull", "Bergen and Rostock", "Cork and Bilbao", "Gdansk and Aarhus", "Oslo and Kiel"),
            ),
            (
                "In its tenth year it was refitted with {v}.",
                "What was the {name} refitted with?",
                ("a battery hybrid engine", "a rotor sail", "a larger crane", "an ice-class hull"),
            ),
            (
                "The crew numbers {v} sailors.",
                "How large is the crew of the {name}?",
                ("eleven", "fourteen", "nine", "twenty"),
            ),
            (
                "Once it rescued {v} in a storm.",
                "Whom did the {name} rescue in a storm?",
                ("the crew of a sinking trawler", "two kayakers", "a lost yacht", "a drifting lifeboat"),
            ),
        ),
    ),
)


def _entity_name(rng: random.Random, used: set[str]) -> str:
    while True:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if word not in used:
            used.add(word)
            return word


def context_set(*, per_kind: int = 10, seed: int = 0) -> tuple[list[Document], list[LabeledQuery]]:
    """Generated context-dependent documents and their queries (module docstring, item 1).

    Args:
        per_kind: documents per template (4 templates; 3 queries per document, about 130 tokens each).
        seed: the generator's seed; the same seed gives the same set.

    Returns:
        ``(documents, queries)``: ``documents`` sorted by ``doc_id`` (``"<kind>-<name>"``); each
        query has one relevant passage, the fact sentence, located by ``str.find`` in the text.
    """
    rng = random.Random(seed)
    used: set[str] = set()
    docs, queries = [], []
    for kind in _KINDS:
        for _ in range(per_kind):
            name = _entity_name(rng, used)
            sentences = [kind.opening.format(name=name, city=rng.choice(_CITIES), year=rng.randint(1850, 1990))]
            facts = [(fact.format(v=rng.choice(values)), question) for fact, question, values in kind.facts]
            sentences += [s for s, _ in facts]
            text = " ".join(sentences)
            doc_id = f"{kind.name}-{name.lower()}"
            docs.append(Document.from_text(doc_id, text))
            # three of the six facts are asked; no fact sentence contains the name
            for sentence, question in rng.sample(facts, 3):
                queries.append(LabeledQuery(question.format(name=name), (locate(text, doc_id, sentence),)))
    return sorted(docs, key=lambda d: d.doc_id), queries


def locate(text: str, doc_id: str, passage: str) -> Passage:
    """The passage's char range in ``text`` (its only occurrence).

    Raises:
        ValueError: the passage is not in the text, or occurs more than once.
    """
    start = text.find(passage)
    if start < 0:
        raise ValueError(f"passage {passage[:60]!r} not found in document {doc_id!r}")
    if text.find(passage, start + 1) >= 0:
        raise ValueError(f"passage {passage[:60]!r} occurs more than once in document {doc_id!r}")
    return Passage(doc_id, (start, start + len(passage)))


# ----------------------------------------------------------------------------- 2. stdlib set

#: (query, module, header of the answering docstring section; ``None``: the module docstring).
STDLIB_QUERIES: tuple[tuple[str, str, str | None], ...] = (
    ("compress bytes in memory with gzip", "gzip", "Function gzip.compress():"),
    ("decompress gzip data held in a bytes object", "gzip", "Function gzip.decompress():"),
    ("copy a whole directory tree recursively", "shutil", "Function shutil.copytree():"),
    ("find the full path of an executable on PATH", "shutil", "Function shutil.which():"),
    ("how much free space is left on a disk", "shutil", "Function shutil.disk_usage():"),
    ("temporary directory that is deleted automatically", "tempfile", "Class tempfile.TemporaryDirectory:"),
    ("serialize a Python object to a JSON formatted string", "json", "Function json.dumps():"),
    ("parse a JSON document from a string", "json", "Function json.loads():"),
    ("encode bytes as base64", "base64", "Function base64.b64encode():"),
    ("decode URL-safe base64", "base64", "Function base64.urlsafe_b64decode():"),
    ("insert an item into a sorted list and keep it sorted", "bisect", "Function bisect.insort():"),
    ("get the n smallest elements of a dataset", "heapq", "Function heapq.nsmallest():"),
    ("merge several sorted inputs into a single sorted output", "heapq", "Function heapq.merge():"),
    ("median of a list of numbers", "statistics", "Function statistics.median():"),
    ("sample standard deviation of data", "statistics", "Function statistics.stdev():"),
    ("generate a random URL-safe text token", "secrets", "Function secrets.token_urlsafe():"),
    ("generate a random UUID", "uuid", "Function uuid.uuid4():"),
    ("UUID from a namespace and a name with SHA-1", "uuid", "Function uuid.uuid5():"),
    ("escape special characters in a glob pattern", "glob", "Function glob.escape():"),
    ("quote a string so it is safe in a shell command line", "shlex", "Function shlex.quote():"),
    ("split a string using shell-like syntax", "shlex", "Function shlex.split():"),
    ("wrap a paragraph of text to a maximum line width", "textwrap", "Function textwrap.wrap():"),
    ("remove common leading whitespace from every line", "textwrap", "Function textwrap.dedent():"),
    ("find close matches to a word in a list of possibilities", "difflib", "Function difflib.get_close_matches():"),
    ("unified diff of two lists of lines", "difflib", "Function difflib.unified_diff():"),
    ("create an IPv4 or IPv6 network object from a string", "ipaddress", "Function ipaddress.ip_network():"),
    ("escape ampersands and angle brackets for HTML", "html", "Function html.escape():"),
    ("pick a random element from a non-empty sequence", "random", "Function random.choice():"),
    ("shuffle a list in place", "random", "Function random.shuffle():"),
    ("make a deep copy of an object", "copy", "Function copy.deepcopy():"),
    ("is a given year a leap year", "calendar", "Function calendar.isleap():"),
    ("compare two files to see if they are equal", "filecmp", "Function filecmp.cmp():"),
    ("compute a CRC-32 checksum of data", "zlib", "Function zlib.crc32():"),
    ("pack values into bytes according to a format string", "struct", "Function struct.pack():"),
    ("deduce the dialect of a CSV file", "csv", "Class csv.Sniffer:"),
    ("get the login name of the current user", "getpass", "Function getpass.getuser():"),
    ("time how long a small code snippet takes to run", "timeit", "Function timeit.timeit():"),
    ("queue that retrieves the most recently added entry first", "queue", "Class queue.LifoQueue:"),
    ("pretty-print a nested data structure", "pprint", "Function pprint.pprint():"),
    ("test whether a filename matches a shell pattern", "fnmatch", "Function fnmatch.fnmatch():"),
    ("convert colors between RGB and HSV", "colorsys", None),
)

_HEADER = re.compile(r"(?m)^(?:Class|Method|Function) [\w.]+(?:\(\))?:$")


def section_range(text: str, doc_id: str, header: str | None) -> tuple[int, int]:
    """Char range of a docstring section of a demo document: from ``header`` (a line of its own,
    after a blank line) to the blank line before the next header; ``None``: the module docstring.

    Raises:
        ValueError: the header is not in the document, or is there more than once.
    """
    starts = [m.start() for m in _HEADER.finditer(text) if m.start() == 0 or text[m.start() - 2 : m.start()] == "\n\n"]
    if header is None:
        start = 0
    else:
        found = [s for s in starts if text.startswith(header + "\n", s) or text[s:] == header]
        if len(found) != 1:
            raise ValueError(
                f"docstring section {header!r} {'not found' if not found else 'found twice'} in document {doc_id!r}"
            )
        start = found[0]
    end = next((s - 2 for s in starts if s > start), len(text))
    if end <= start:
        raise ValueError(f"module docstring of {doc_id!r} is empty")
    return start, end


def stdlib_queries(documents: Mapping[str, str]) -> list[LabeledQuery]:
    """The standard-library queries with char ranges located in ``documents`` (doc_id -> text).

    Raises:
        ValueError: a module is not among the documents, or a section is not found (names both).
    """
    out = []
    for query, module, header in STDLIB_QUERIES:
        if module not in documents:
            raise ValueError(f"query {query!r}: module {module!r} is not in the demo corpus")
        out.append(LabeledQuery(query, (Passage(module, section_range(documents[module], module, header)),)))
    return out


# ----------------------------------------------------------------------------- the demo


def demo_granularities() -> dict[str, Any]:
    """The granularities of the demo table, finest first: ``sentences32`` (``Sentences(max_tokens=32)``)
    and ``sentences128`` (``Sentences(max_tokens=128)``, the default strategy), pooled from one
    encode; each 32-token chunk's parent is the 128-token chunk holding most of its tokens."""
    from latechunk_dagster.core.chunking import Sentences

    return {"sentences32": Sentences(max_tokens=32), "sentences128": Sentences(max_tokens=128)}


def run_demo_evaluation(chunker: Any, *, k: int = 10, write_to: Path | None = None) -> str:
    """The demo's granularities side by side on the generated context-dependent set; the text to print.

    The set is chunked into :func:`demo_granularities` from one encode, into temporary tables
    (:func:`~latechunk_dagster.evaluation.sweep.evaluate_granularities`): late and naive per
    granularity and small-to-big, and the winner. The standard-library queries are evaluated on
    the demo table by its ``retrieval_eval`` asset, from the file :func:`write_stdlib_queries` writes.

    Args:
        chunker: the :class:`~latechunk_dagster.LateChunker` of the shipped model.
        write_to: directory for the query file ``context.jsonl``, so users can run
            ``latechunk eval`` on it; ``None``: not written.
    """
    from latechunk_dagster.evaluation import evaluate_granularities, write_queries

    docs, queries = context_set()
    strategies = demo_granularities()
    report = evaluate_granularities(chunker, {"context": docs}, strategies, queries, k=k)
    if write_to is not None:
        write_queries(write_to / "context.jsonl", queries)
    names = ", ".join(f"{g} = {s.describe()}" for g, s in strategies.items())
    return "\n".join(
        [
            f"retrieval by granularity: generated context-dependent set ({len(docs)} documents; {names})",
            report.markdown(),
            report.caption(),
            report.verdict(),
            report.best(),
        ]
    )


def write_stdlib_queries(store: DocumentStore, path: Path) -> Path:
    """Write the standard-library queries, located in the demo corpus ``store``, as a query file at ``path``.

    Raises:
        ValueError: a section is not in the store (another Python's docstrings).
    """
    from latechunk_dagster.evaluation import write_queries

    return write_queries(path, stdlib_queries({d.doc_id: d.text for s in store.shards() for d in store.read_shard(s)}))
