#!/usr/bin/env bash
# Stop the cluster started by .ci/slurm-up.sh, daemon by daemon through their PID files
# (never by process name). --purge also drops queued jobs, the job-id counter and accounting.
set -uo pipefail

stop() {  # stop <name> <pidfile>
  [ -s "$2" ] || return 0
  local pid; pid=$(cat "$2")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then echo "$1 ($pid) ignored SIGTERM for 10 s: SIGKILL" >&2; kill -9 "$pid"; fi
    echo "stopped $1 ($pid)" >&2
  fi
  rm -f "$2"
}

# one slurmd per node (multiple-slurmd mode: the debug node and n1/n2); slurmd.pid is an older layout's
for pidfile in /run/slurmd.pid /run/slurmd-*.pid; do
  [ -e "$pidfile" ] && stop "slurmd $(basename "$pidfile" .pid)" "$pidfile"
done
stop slurmctld /run/slurmctld.pid
stop slurmdbd /run/slurmdbd.pid
if [ "${1:-}" = --purge ] && [ -S /run/mysqld/mysqld.sock ]; then
  mariadb --socket=/run/mysqld/mysqld.sock -e "DROP DATABASE IF EXISTS slurm_acct_db" && echo "dropped slurm_acct_db" >&2
fi
stop mariadbd /run/mysqld/mysqld.pid
stop munged /run/munge/munged.pid
if [ "${1:-}" = --purge ]; then
  rm -rf /var/spool/cancelctl-ci/slurmctld/* /var/spool/cancelctl-ci/slurmd/*  # slurm-up.sh's $STATE
  echo "purged slurm state" >&2
fi
exit 0
