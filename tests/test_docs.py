"""The documentation: the MkDocs site builds in strict mode (a broken link, a missing anchor or image, a page
left out of the navigation fails), the option tables of the reference pages list exactly the options of
`--help`, and no page speaks of the machines or the bookkeeping of the project's development."""
import re
import subprocess
import sys

import pytest
import yaml

from helpers import REPO
from peanut_py.cli import build_parser

DOCS = REPO / "docs"


def nav_pages(nav):
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from nav_pages(value)
        else:
            yield value


def test_the_site_builds_strictly_with_a_home_page_and_every_page(tmp_path):
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"mkdocs build --strict failed:\n{p.stdout}\n{p.stderr}"
    assert (site / "index.html").is_file()
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    for page in nav_pages(config["nav"]):
        assert (site / page.replace(".md", ".html")).is_file(), page
    # the changelog page is CHANGELOG.md itself
    assert "Unreleased" in (site / "changelog.html").read_text()


def test_every_page_is_in_the_navigation():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    in_nav = set(nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - in_nav == set(), "pages missing from mkdocs.yml's nav"
    assert in_nav - pages == set(), "nav entries without a page"


def option_cells(page):
    """The options named in the first column of every table of ``page`` whose header starts with 'option'."""
    found = set()
    in_table = False
    for line in (DOCS / page).read_text().splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if not in_table:
            in_table = cells[0].lower().startswith("option")
            continue
        if set(cells[0]) <= set("-: "):
            continue
        for code in re.findall(r"`([^`]+)`", cells[0]):
            found.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", code))
    return found


def parser_options(command):
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {s for a in sub.choices[command]._actions for s in a.option_strings} - {"-h", "--help"}


@pytest.mark.parametrize("command, page", [("index", "indexing.md"), ("map", "mapping.md"),
                                           ("devices", "devices.md")])
def test_option_tables_list_exactly_the_options_of_help(command, page):
    documented, actual = option_cells(page), parser_options(command)
    assert actual - documented == set(), f"options of `peanut {command}` missing from docs/{page}"
    assert documented - actual == set(), f"docs/{page} documents options `peanut {command}` does not have"


# Words that belong to the project's development, not to its users: a development machine, its paths, the
# rounds of work and the issue tracker.
NOT_FOR_USERS = [r"\bVM\b", r"(?<![\w.-])/work/", r"\bsession\b", r"\bwork round", r"\bissue #?\d+", r"\bround \d+\b",
                 r"\bs[1-9]-(?:se|pe|5m|final)", r"\blent\b"]


@pytest.mark.parametrize("path", sorted([*DOCS.rglob("*.md"), REPO / "README.md"]), ids=lambda p: p.name)
def test_pages_do_not_name_development_machines_or_rounds(path):
    text = path.read_text()
    hits = [m.group(0) for pattern in NOT_FOR_USERS for m in re.finditer(pattern, text)]
    assert not hits, f"{path.name}: {hits}"

