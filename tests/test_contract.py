"""The contract lives in the repository: every citation of it names a section that ``docs/contract.md`` has."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "contract.md"


def _sources() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("latechunk_dagster", "tests", "bench"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_every_cited_contract_section_exists() -> None:
    sections = set(re.findall(r"(?m)^## (\d+)\. ", CONTRACT.read_text()))
    assert sections == {"1", "2", "3", "4", "5", "6", "7", "8"}
    cited: dict[str, set[str]] = {}
    for path in _sources():
        text = " ".join(path.read_text(encoding="utf-8").split())
        for numbers in re.findall(r"contract\.md`{0,2},? sections? ([\d ,and]+)|contract sections? ([\d ,and]+)", text):
            for n in re.findall(r"\d+", "".join(numbers)):
                cited.setdefault(n, set()).add(str(path.relative_to(ROOT)))
    assert cited, "no citation of the contract found"
    assert not {n: files for n, files in cited.items() if n not in sections}


def test_nothing_points_outside_the_repository_for_the_contract() -> None:
    here = Path(__file__).resolve()
    outside = [
        str(p.relative_to(ROOT))
        for p in _sources()
        if p != here and re.search(r"SPEC\.md|SPEC,? sections?", p.read_text(encoding="utf-8"))
    ]
    assert outside == []
