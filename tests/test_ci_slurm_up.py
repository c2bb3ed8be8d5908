""".ci/slurm-up.sh on machines that ran another single-node SLURM before: another
cluster's slurmctld state in /var/spool/slurmctld (slurmctld stops at once on CLUSTER NAME MISMATCH),
and a `slurm` accounting user with another password (slurmdbd: "Access denied for user 'slurm'").

The script runs for real in a private mount namespace: tmpfs over every path it writes (/etc/slurm,
/var/spool, /run, logs, munge), stand-ins for the daemons and clients on PATH (slurmctld refuses a
state folder of another cluster, as the real one does), so the machine's own cluster — CI's, running
beside these tests — is never touched. The SQL it runs is checked against the machine's MariaDB with
a scratch user, when there is one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLURM_UP = ROOT / ".ci" / "slurm-up.sh"
DB_SOCKET = "/run/mysqld/mysqld.sock"
SCRATCH = "/var/spool /run /etc/slurm /var/log/slurm /etc/munge /var/lib/munge /var/log/munge"


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


needs_namespace = pytest.mark.skipif(not _can_unshare(), reason="needs root and a private mount namespace (unshare -m)")

# the daemons and clients slurm-up.sh calls; slurmctld/slurmd read the config it wrote, as the real ones do
SHIMS = {
    "slurmd": """
        if [ "$1" = -C ]; then echo "NodeName=x CPUs=2 RealMemory=4000"; exit 0; fi
        spool=$(conf SlurmdSpoolDir); spool=${spool//%n/$2}
        [ -d "$spool" ] || { echo "slurmd: no spool $spool" >>"$CALLS"; exit 1; }
        echo "slurmd $2 spool=$spool" >>"$CALLS"; daemon >"/run/slurmd-$2.pid"
    """,
    "slurmctld": """
        state=$(conf StateSaveLocation); name=$(conf ClusterName)
        if [ -e "$state/clustername" ] && [ "$(cat "$state/clustername")" != "$name" ]; then
          echo "slurmctld: fatal: CLUSTER NAME MISMATCH" >>"$CALLS"; exit 1
        fi
        echo "$name" >"$state/clustername"; echo "slurmctld state=$state $(ls "$state" | tr '\\n' ' ')" >>"$CALLS"
        daemon >/run/slurmctld.pid
    """,
    "slurmdbd": "daemon >/run/slurmdbd.pid",
    "scontrol": """
        case "$1" in
          ping) [ -s /run/slurmctld.pid ] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null ;;
          show) echo "MaxArraySize            = 8" ;;
        esac
    """,
    "sinfo": "echo idle",
    "sacctmgr": "echo cancelctl-ci",
    "munge": "echo credential",
    "unmunge": "cat >/dev/null",
    "mariadb-admin": "exit 0",
    "mariadb": 'echo "mariadb $*" >>"$CALLS"',
    **{name: 'echo "$0 $*" >>"$CALLS"' for name in ("munged", "mungekey", "runuser", "apt-get", "mariadbd", "mariadb-install-db")},
}
PRELUDE = """#!/bin/bash
conf() { sed -n "s/^$1=//p" /etc/slurm/slurm.conf; }
daemon() { sleep 60 >/dev/null 2>&1 & echo $! | tee -a "$SLEEPERS"; }
"""


def run_slurm_up(tmp_path: Path, setup: str) -> tuple[subprocess.CompletedProcess, str]:
    """slurm-up.sh in a private mount namespace after `setup` (shell, run there first); returns the run
    and what the stand-ins were asked to do."""
    shims = tmp_path / "shims"
    shims.mkdir()
    for name, body in SHIMS.items():
        (shims / name).write_text(PRELUDE + textwrap.dedent(body))
        (shims / name).chmod(0o755)
    calls, sleepers = tmp_path / "calls.log", tmp_path / "sleepers"
    calls.touch()
    sleepers.touch()
    inside = f"""
        set -e
        for d in {SCRATCH}; do mkdir -p "$d"; mount -t tmpfs none "$d"; done
        echo key >/etc/munge/munge.key
        {setup}
        set +e
        PATH={shims}:$PATH CANCELCTL_SLURM_WAIT_S=3 bash {SLURM_UP}
        rc=$?
        echo "--- conf"; grep -E '^(StateSaveLocation|SlurmdSpoolDir)=' /etc/slurm/slurm.conf
        echo "--- state"; find /var/spool -type f | sort
        exit $rc
    """
    env = {**os.environ, "CALLS": str(calls), "SLEEPERS": str(sleepers)}
    try:
        done = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", inside],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        for pid in sleepers.read_text().split():
            subprocess.run(["kill", pid], capture_output=True)
    return done, calls.read_text()


@needs_namespace
def test_another_clusters_state_in_var_spool_slurmctld_does_not_stop_it(tmp_path):
    done, calls = run_slurm_up(tmp_path, "mkdir -p /var/spool/slurmctld; echo other >/var/spool/slurmctld/clustername")
    assert done.returncode == 0, done.stdout + done.stderr + calls
    assert "CLUSTER NAME MISMATCH" not in calls and "ready:" in done.stderr
    assert "StateSaveLocation=/var/spool/cancelctl-ci/slurmctld" in done.stdout
    assert "SlurmdSpoolDir=/var/spool/cancelctl-ci/slurmd/%n" in done.stdout
    assert "slurmd n1 spool=/var/spool/cancelctl-ci/slurmd/n1" in calls
    assert "/var/spool/slurmctld/clustername" in done.stdout  # the other cluster's state is left as it was


@needs_namespace
def test_its_own_state_from_the_old_location_goes_on(tmp_path):
    """A machine where this script ran before keeping state in /var/spool/slurmctld: the queue and the
    job-id counter move with it (a fresh counter would reuse job ids slurmdbd already holds)."""
    setup = ("mkdir -p /var/spool/slurmctld; echo cancelctl-ci >/var/spool/slurmctld/clustername; "
             "echo jobs >/var/spool/slurmctld/job_state; echo 'an older conf' >/etc/slurm/slurm.conf")
    done, calls = run_slurm_up(tmp_path, setup)
    assert done.returncode == 0, done.stdout + done.stderr + calls
    assert "/var/spool/cancelctl-ci/slurmctld/job_state" in done.stdout
    assert "slurmctld state=/var/spool/cancelctl-ci/slurmctld clustername job_state" in calls


@needs_namespace
def test_a_fresh_machine(tmp_path):
    done, calls = run_slurm_up(tmp_path, "")
    assert done.returncode == 0, done.stdout + done.stderr + calls
    assert "slurmctld state=/var/spool/cancelctl-ci/slurmctld clustername" in calls
    assert "ALTER USER 'slurm'@'localhost' IDENTIFIED BY 'cancelctl-ci'" in calls


def _sql_of_the_script() -> str:
    """The statement slurm-up.sh gives MariaDB (its `mariadb --socket=$DB_SOCKET -e "..."`)."""
    match = re.search(r'mariadb --socket=\$DB_SOCKET -e "(.*?)"\n', SLURM_UP.read_text(), re.S)
    assert match, "slurm-up.sh no longer creates its database user where this test looks"
    return match.group(1)


@pytest.mark.skipif(os.geteuid() != 0 or not Path(DB_SOCKET).exists() or shutil.which("mariadb") is None,
                    reason="needs the machine's MariaDB (root, its socket)")
def test_an_existing_db_user_with_another_password_gets_the_scripts():
    """The script's own SQL, for a scratch user that exists with another password: the password is
    the script's afterwards (CREATE USER IF NOT EXISTS alone kept the old one)."""
    user, password = f"cc_test_{uuid.uuid4().hex[:8]}", "the-scripts-password"
    sql = _sql_of_the_script().replace("$DB_USER", user).replace("$DB_PASS", password)
    sql = re.sub(r"CREATE DATABASE[^;]*;", "", sql)  # the machine's accounting database is left alone
    admin = ["mariadb", f"--socket={DB_SOCKET}", "-e"]
    subprocess.run([*admin, f"CREATE USER '{user}'@'localhost' IDENTIFIED BY 'set-by-other-means'"], check=True)
    try:
        subprocess.run([*admin, sql], check=True)
        login = subprocess.run(["mariadb", f"--socket={DB_SOCKET}", "-u", user, f"-p{password}", "-e", "SELECT 1"],
                               capture_output=True, text=True)
        assert login.returncode == 0, login.stderr
    finally:
        subprocess.run([*admin, f"DROP USER IF EXISTS '{user}'@'localhost'"], check=True)
