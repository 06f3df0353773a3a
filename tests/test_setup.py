"""The README's two commands are the whole set-up: CI runs what a newcomer runs, the tools the
tests look for are the ones `make test` installs (tests/tools.sh), and every repo file a test
reads is one a fresh clone has."""

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
    for path in (REPO / "tests").glob("*.py"):
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
    for path in (REPO / "tests").glob("*.py"):
        for chain in re.findall(r'REPO((?:\s*/\s*"[^"]+")+)', path.read_text()):
            read.add("/".join(re.findall(r'"([^"]+)"', chain)))
    assert len(read) >= 10, read
    for name in sorted(read):
        assert name in tracked or any(t.startswith(name + "/") for t in tracked), \
            f"a test reads {name}, which a fresh clone lacks (not tracked by git)"
