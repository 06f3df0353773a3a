"""`lockstep schedule --local`: a crontab entry that runs `lockstep run` under a lock."""

import os
import shlex

from conftest import lockstep
from pipeline import local_schedule

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
    first = lockstep("schedule", "--local", "--cron", "0 3 * * *", "--config", config, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = lockstep("schedule", "--local", "--cron", "0 0 4 * * *", "--config", config,
                     cwd=tmp_path)  # KFP-style 6 fields with second 0 are accepted
    assert again.returncode == 0, again.stderr
    lines = (tmp_path / "tab").read_text().splitlines()
    assert lines[0] == "15 1 * * * /usr/bin/backup"  # other entries are kept
    (entry,) = lines[1:]  # replaced, not duplicated
    assert entry.startswith("0 4 * * * cd ") and entry.endswith("# lockstep-schedule:lockstep")
    command = shlex.split(entry[len("0 4 * * * "):].split(" >> ")[0].split(" && ", 1)[1])
    assert command[command.index("--lock") + 1] == str(tmp_path / "root" / "run.lock")
    assert command[command.index("--config") + 1] == str(config)
    assert f">> {tmp_path / 'root' / 'schedule.log'} 2>&1" in entry

    bad = lockstep("schedule", "--local", "--cron", "*/5 * * *", cwd=tmp_path)
    assert bad.returncode == 2 and "5 crontab fields" in bad.stderr

    removed = lockstep("schedule", "--local", "--remove", "--config", config, cwd=tmp_path)
    assert removed.returncode == 0 and "removed local schedule 'lockstep'" in removed.stdout
    assert (tmp_path / "tab").read_text().splitlines() == ["15 1 * * * /usr/bin/backup"]


def test_no_crontab_is_one_line(tmp_path):
    result = lockstep("schedule", "--local", "--cron", "0 3 * * *", cwd=tmp_path,
                      env={"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr.strip().endswith("crontab not found: install cron (e.g. apt-get install cron)")


def test_a_second_run_skips_while_the_first_holds_the_lock(tmp_path):
    lock = tmp_path / "run.lock"
    with local_schedule.run_lock(str(lock)):
        second = lockstep("run", "--lock", lock, "--pipeline-root", tmp_path / "root",
                          "--serving-dir", tmp_path / "serving")
    assert second.returncode == 0, second.stderr
    assert f"another lockstep run holds {lock}; skipping this one" in second.stderr
    assert not (tmp_path / "root").exists()
    # Released: the lock can be taken again.
    with local_schedule.run_lock(str(lock)):
        pass
