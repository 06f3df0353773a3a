"""`lockstep schedule --local`: the crontab entry that runs `lockstep run`, replaced not
duplicated, removed, printed without installing; cron missing and hostile paths refused, each one
line (what the entry starts: tests/test_local_schedule.py)."""

import os
import shlex

from conftest import cli

FAKE_CRONTAB = """#!/bin/sh
# crontab -l / crontab - over a file, like cron's own tool.
store="$CRONTAB_FILE"
if [ "$1" = "-l" ]; then
  [ -f "$store" ] || { echo "no crontab for $(id -un)" >&2; exit 1; }
  cat "$store"
elif [ "$1" = "-" ]; then
  cat > "$store"
fi
"""


def _env(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "crontab").write_text(FAKE_CRONTAB)
    (bin_dir / "crontab").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CRONTAB_FILE": str(tmp_path / "tab")}


def test_install_replace_remove(tmp_path, monkeypatch):
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    (tmp_path / "tab").write_text("15 1 * * * /usr/bin/backup\n")
    config = tmp_path / "c.toml"
    config.write_text(f'[paths]\npipeline_root = "{tmp_path / "root"}"\n')
    first = cli("schedule", "--local", "--cron", "0 3 * * *", "--config", config, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = cli("schedule", "--local", "--cron", "0 0 4 * * *", "--config", config,
                cwd=tmp_path)  # KFP-style 6 fields with second 0 are accepted
    assert again.returncode == 0, again.stderr
    lines = (tmp_path / "tab").read_text().splitlines()
    assert lines[0] == "15 1 * * * /usr/bin/backup"  # other entries are kept
    (entry,) = lines[1:]  # replaced, not duplicated
    assert entry.startswith("0 4 * * * mkdir -p ") and entry.endswith("# lockstep-schedule:lockstep")
    command = shlex.split(entry[len("0 4 * * * "):].split(" >> ")[0].split(" && ", 2)[2])
    assert command[command.index("--config") + 1] == str(config)
    assert "--lock" not in command  # the run takes the pipeline root's own lock
    assert entry.startswith(f"0 4 * * * mkdir -p {tmp_path / 'root' / 'logs'} && ")
    assert f">> {tmp_path / 'root' / 'logs' / 'schedule.log'} 2>&1" in entry

    bad = cli("schedule", "--local", "--cron", "*/5 * * *", cwd=tmp_path)
    assert bad.returncode == 2 and "5 crontab fields" in bad.stderr

    removed = cli("schedule", "--local", "--remove", "--config", config, cwd=tmp_path)
    assert removed.returncode == 0 and "removed local schedule 'lockstep'" in removed.stdout
    assert (tmp_path / "tab").read_text().splitlines() == ["15 1 * * * /usr/bin/backup"]


def test_no_crontab_is_one_line_naming_debians_package(tmp_path):
    result = cli("schedule", "--local", "--cron", "0 3 * * *", cwd=tmp_path,
                 env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("lockstep: error: crontab not found: a local schedule needs cron (on "
                           "Debian or Ubuntu: apt-get install cron, Debian's `cron` package)")


def test_print_shows_the_entry_and_installs_nothing(tmp_path):
    """No crontab on PATH at all: --print needs none, writes no crontab and no log directory."""
    config = tmp_path / "c.toml"
    config.write_text(f'[paths]\npipeline_root = "{tmp_path / "root"}"\n')
    result = cli("schedule", "--local", "--cron", "0 3 * * *", "--config", config, "--print",
                 cwd=tmp_path, env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    said, entry = result.stdout.strip().splitlines()
    assert said == ("lockstep: local schedule 'lockstep' (machine local time), not installed; "
                    "`crontab -e` takes this line as it is:")
    assert entry.startswith(f"0 3 * * * mkdir -p {tmp_path / 'root' / 'logs'} && cd ")
    assert f"--config {config} >> {tmp_path / 'root' / 'logs' / 'schedule.log'} 2>&1" in entry
    assert entry.endswith("# lockstep-schedule:lockstep")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]  # nothing made
    kfp = cli("schedule", "--cron", "0 0 3 * * *", "--print", cwd=tmp_path)
    assert kfp.returncode == 2 and kfp.stderr.strip().endswith("--print goes with --local (the "
                                                               "crontab entry); a KFP schedule has "
                                                               "nothing to print before it is made")


def test_hostile_names_and_paths_are_refused(tmp_path, monkeypatch):
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    (tmp_path / "tab").write_text("15 1 * * * /usr/bin/backup\n")
    for toml in ('[paths]\npipeline_root = "/tmp/x\\n* * * * * rm -rf ~"\n',
                 '[paths]\npipeline_root = "/tmp/100%"\n'):
        config = tmp_path / "hostile.toml"
        config.write_text(toml)
        result = cli("schedule", "--local", "--cron", "0 3 * * *", "--config", config,
                     cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert "the log path" in line and "control characters or '%'" in line, line
    for name in ("nightly\n* * * * * touch /tmp/owned", "a%b"):
        result = cli("schedule", "--local", "--cron", "0 3 * * *", "--name", name,
                     cwd=tmp_path)
        assert result.returncode == 2 and "the schedule name" in result.stderr, result.stderr
    assert (tmp_path / "tab").read_text() == "15 1 * * * /usr/bin/backup\n"  # untouched
