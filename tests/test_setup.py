"""The README's two commands are the whole set-up: CI runs what a newcomer runs, the tools the
tests look for are the ones `make test` installs (tests/tools.sh), and every repo file a test
reads is one a fresh clone has. The README stays the way in: at most 120 lines, linking every page
of docs/, and no page links to a repo path, or a heading, that is not there."""

import re
import subprocess

from conftest import REPO


def _commands(text: str) -> list[str]:
    """The command of each line of a shell text, comments and blank lines dropped."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def test_readme_setup_is_make_run_then_make_test():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Set up and run", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    commands = _commands(block)
    assert commands[:2] == ["make run", "make test"], commands
    assert set(commands[2:]) <= {"make image"}, commands  # optional, and says so


def test_ci_runs_the_linters_and_the_readme_test_command_only():
    script = _commands((REPO / ".ci" / "run").read_text())
    steps = [c for c in script if not c.startswith(("set ", "cd "))]
    assert steps == ["make lint", "make test"], steps


def test_every_tool_a_test_looks_for_is_one_make_test_installs():
    tools_sh = (REPO / "tests" / "tools.sh").read_text()
    looked_for = set()
    for path in (REPO / "tests").rglob("*.py"):
        text = path.read_text()
        looked_for |= set(re.findall(r'shutil\.which\("([\w.-]+)"\)', text))
        for names in re.findall(r"for tool in \(([^)]*)\)", text):  # shutil.which(tool)
            looked_for |= set(re.findall(r'"([\w.-]+)"', names))
    assert {"chromium", "podman", "runc", "debootstrap", "docker"} <= looked_for
    for tool in looked_for:
        assert re.search(rf"\b{re.escape(tool)}\b", tools_sh), \
            f"tests look for {tool}, which tests/tools.sh neither installs nor names"


def test_every_repo_file_a_test_reads_is_tracked():
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.split())
    read = set()
    for path in (REPO / "tests").rglob("*.py"):
        for chain in re.findall(r'REPO((?:\s*/\s*"[^"]+")+)', path.read_text()):
            read.add("/".join(re.findall(r'"([^"]+)"', chain)))
    assert len(read) >= 10, read
    for name in sorted(read):
        assert name in tracked or any(t.startswith(name + "/") for t in tracked), \
            f"a test reads {name}, which a fresh clone lacks (not tracked by git)"


# The README is the way in (at most README_LINES lines: what lockstep is, set up and run in its
# first SETUP_WITHIN lines, your own CSV, exit statuses, links); everything else is a page of docs/.
README_LINES = 120
SETUP_WITHIN = 15
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # code blocks and spans: not links
# [text](target) and ![figure](target), the target with an optional "title"
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _pages() -> list:
    """The pages a reader follows: the README, ARCHITECTURE and every markdown file in docs/, and
    the other markdown files git knows (infra/, examples/, data/)."""
    return sorted({REPO / "README.md", REPO / "ARCHITECTURE.md", *(REPO / "docs").glob("*.md"),
                   *(REPO / name for name in _repo_files() if name.endswith(".md"))})


def _repo_files() -> set[str]:
    """What a clone of this tree holds: tracked files and files not yet added that git does not
    ignore (so a page written in this change counts), and that exist."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\n")
    return {name for name in listed if name and (REPO / name).is_file()}


def _relative_links(page) -> list[tuple[str, str]]:
    """(link as written, repo path it resolves to) for each relative link of a markdown page,
    its #fragment dropped; links with a scheme (https:, mailto:) and bare #anchors are not
    repo paths."""
    found = []
    for target in _LINK.findall(_CODE.sub("", page.read_text())):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not path or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
            continue
        resolved = (page.parent / path).resolve()
        try:
            found.append((target, resolved.relative_to(REPO).as_posix()))
        except ValueError:  # outside the repository
            found.append((target, "../" + str(resolved)))
    return found


def test_readme_has_at_most_120_lines_and_the_two_commands_in_its_first_15():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, (f"README.md has {len(lines)} lines; move the detail to a "
                                        "docs/ page")
    first = _commands("\n".join(lines[:SETUP_WITHIN]))
    assert any(c.startswith("make run") for c in first), first
    assert any(c.startswith("make test") for c in first), first


def test_figures_are_generated_not_copied_by_hand():
    """docs/figures.md is benchmarks/figures.py's output (`--write`), and no other page or the
    README quotes a test count by hand: they link to it."""
    page = (REPO / "docs" / "figures.md").read_text()
    assert page.startswith("# Figures, as measured") and "benchmarks/figures.py on " in page
    assert re.search(r"^  tests: \d+ \(\d+ fast, make test-fast; \d+ unit", page, re.M), page
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        if path.name == "figures.md":
            continue
        counted = re.findall(r"\b\d{3,} (?:tests|passed)\b", path.read_text())
        assert not counted, f"{path.name} quotes {counted}: link to docs/figures.md instead"


def test_the_readme_links_every_docs_page_and_every_docs_link_is_a_page():
    files = _repo_files()
    docs = {name for name in files if name.startswith("docs/")}
    assert docs, "no docs/ pages"
    linked = {path for _, path in _relative_links(REPO / "README.md") if path.startswith("docs/")}
    assert linked - files == set(), f"README.md links to pages not in docs/: {linked - files}"
    assert docs - linked == set(), f"docs/ pages the README does not link to: {docs - linked}"


def test_no_page_links_to_a_repo_path_that_does_not_exist():
    files = _repo_files()
    directories = {parent for name in files for parent in
                   ("/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1))}
    broken = [f"{page.relative_to(REPO)}: ({target})" for page in _pages()
              for target, path in _relative_links(page)
              if path not in files and path.rstrip("/") not in directories]
    assert len(_pages()) >= 14
    assert broken == [], "links to paths a clone does not have:\n" + "\n".join(broken)


def _anchors(page) -> set[str]:
    """The #anchors GitHub makes of a markdown page's headings: lower case, punctuation but '-'
    and '_' dropped, spaces as '-', a repeated one numbered."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", re.sub(r"```.*?```", "", page.read_text(),
                                                            flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(next(f"{slug}-{n}" if n else slug for n in range(100)
                         if (f"{slug}-{n}" if n else slug) not in anchors))
    return anchors


def test_every_anchor_a_page_links_to_is_a_heading_there():
    missing = []
    for page in _pages():
        for target, path in _relative_links(page):
            if "#" in target and path.endswith(".md") and (REPO / path).is_file():
                anchor = target.split("#", 1)[1]
                if anchor not in _anchors(REPO / path):
                    missing.append(f"{page.relative_to(REPO)}: ({target})")
    assert missing == [], "links to headings that are not there:\n" + "\n".join(missing)


def test_the_link_check_sees_links_and_skips_code_and_urls(tmp_path):
    page = REPO / "docs" / "cli.md"
    links = dict(_relative_links(page))
    assert links["config.md"] == "docs/config.md"
    assert links["../ARCHITECTURE.md"] == "ARCHITECTURE.md"
    assert links["../README.md#exit-statuses"] == "README.md"
    assert not [t for t in links if t.startswith("http")]
    fake = tmp_path / "page.md"
    fake.write_text("[a](missing.md) `[b](in-code.md)`\n```\n[c](in-block.md)\n```\n"
                    "[d](https://example.com/x.md) [e](#here) ![f](fig.svg \"title\")\n")
    targets = [t for t, _ in _relative_links(fake)]
    assert targets == ["missing.md", "fig.svg"], targets
    fake.write_text("# One `two`: three?\n## One `two`: three?\n```\n# not a heading\n```\n")
    assert _anchors(fake) == {"one-two-three", "one-two-three-1"}


def test_make_setup_compiles_the_environments_bytecode_only_when_it_installs_it(tmp_path):
    """`make setup` compiles the environment's bytecode where the stamp is missing or older than
    uv.lock, and otherwise syncs without it; pyproject.toml does not ask uv to compile at every
    `uv sync` and `uv run` (all of site-packages each time: 2 s a command)."""
    import os
    import tomllib

    assert "compile-bytecode" not in tomllib.loads(
        (REPO / "pyproject.toml").read_text()).get("tool", {}).get("uv", {})
    (tmp_path / "Makefile").write_text((REPO / "Makefile").read_text())
    lock = tmp_path / "uv.lock"
    lock.write_text("")
    # The lock written a while ago, as a checkout writes it: make's /bin/sh (dash) compares `-nt`
    # in whole seconds, so a stamp touched in the lock's second is not newer than it (this test
    # failed 2 runs in 5 so).
    written = lock.stat().st_mtime - 60
    os.utime(lock, (written, written))
    (tmp_path / ".venv").mkdir()
    stamp = tmp_path / ".venv" / ".lockstep-bytecode"

    def syncs() -> list[str]:
        out = subprocess.run(["make", "-s", "setup", "UV=echo uv"], cwd=tmp_path, check=True,
                             capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line.startswith("uv sync")]

    assert syncs() == ["uv sync --frozen --compile-bytecode"] and stamp.exists()  # no stamp
    assert syncs() == ["uv sync --frozen"]  # the stamp newer than the lock
    earlier = lock.stat().st_mtime - 10
    os.utime(stamp, (earlier, earlier))  # the lock changed since the stamp
    assert syncs() == ["uv sync --frozen --compile-bytecode"]
    assert syncs() == ["uv sync --frozen"]
