"""`lockstep schedule --local`: a crontab entry that runs `lockstep run`; one run per pipeline
root (the run lock, status 3), a run timeout (status 4), and hostile paths refused. The schedule
commands run the CLI's main in this process; the runs, what cron starts and the lock's second
holder are processes."""

import os
import re
import shlex
import subprocess
import time

from conftest import REPO, cli, lockstep
from pipeline.local import run_lock

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


def test_a_scheduled_run_with_a_missing_root_starts_and_logs(tmp_path, monkeypatch):
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "not yet" / "root"
    config = tmp_path / "c.toml"
    config.write_text(f'[data]\nlabel = "no_such_column"\n[paths]\npipeline_root = "{root}"\n')
    result = cli("schedule", "--local", "--cron", "0 3 * * *", "--config", config,
                 cwd=REPO)
    assert result.returncode == 0, result.stderr
    import shutil

    shutil.rmtree(tmp_path / "not yet")  # removed after scheduling: the entry must cope
    [entry] = (tmp_path / "tab").read_text().splitlines()
    command = re.sub(r"^(\S+ ){5}", "", entry).rsplit(" # lockstep-schedule:", 1)[0]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    cron = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True,
                          timeout=300)
    assert cron.returncode == 2, (cron.stdout, cron.stderr)  # lockstep's own input error
    log = (root / "logs" / "schedule.log").read_text()
    assert "label column 'no_such_column' is not in the header" in log, log


def test_a_second_run_exits_3_and_says_who_holds_the_lock(tmp_path):
    root = tmp_path / "root"
    with run_lock.hold(run_lock.default_path(str(root))):
        tic = time.monotonic()
        second = lockstep("run", "--pipeline-root", root, "--serving-dir", tmp_path / "serving",
                          "--wait", "2")
        waited = time.monotonic() - tic
    assert second.returncode == 3, second.stderr
    [line] = second.stderr.strip().splitlines()
    assert line.startswith(f"lockstep: error: another lockstep run holds {root / 'run.lock'}: "
                           f"pid {os.getpid()} on "), line
    assert "running since" in line and "(waited 2s)" in line, line
    assert waited >= 2
    assert not (tmp_path / "serving").exists() and not (root / "metadata.sqlite").exists()
    with run_lock.hold(run_lock.default_path(str(root))):  # released: it can be taken again
        pass


def test_a_run_past_its_timeout_stops_with_status_4_and_frees_the_lock(tmp_path):
    root = tmp_path / "root"
    result = lockstep("run", "--pipeline-root", root, "--serving-dir", tmp_path / "serving",
                      "--timeout-minutes", "0.05")
    assert result.returncode == 4, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr.strip().splitlines()[-1] == (
        "lockstep: error: the run took longer than 0.05 min (run.timeout_minutes); stopped")
    with run_lock.hold(run_lock.default_path(str(root))):
        pass
