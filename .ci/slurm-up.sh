#!/usr/bin/env bash
# A real SLURM cluster for cancelctl's slurm-marked tests (Debian 12, no systemd): the single node
# `$(hostname -s)` in partition `debug` (the default, used by most tests), plus two nodes n1/n2 in
# partition `multi` for the 2-node (Ray across an allocation) tests. n1/n2 run on this same machine in
# Slurm's multiple-slurmd mode (Debian's build has MULTIPLE_SLURMD=Yes): one slurmd per node
# (`slurmd -N n1`), each with its own Port=, spool/pid/log (%n) and loopback address 127.0.1.x, so
# nothing leaves the machine.
#
# slurm-wlm + munge + slurmdbd on MariaDB, so `sacct` works: cancelctl reads job states from one
# sacct call per poll, and submitit's own result() would hang forever on a job killed outside
# Python without it. Idempotent: installs what is missing, rewrites the config only when it
# changed (restarting the daemons that read it), starts what is not running, waits for an idle node.
#
# Settings the tests depend on (override with the env vars):
#   CANCELCTL_SLURM_CPUS=8          CPUs advertised (overcommits a 2-core VM so array tasks overlap)
#   CANCELCTL_SLURM_MAX_ARRAY=8     MaxArraySize: small, so a 9+-run sweep must split into arrays
#   CANCELCTL_SLURM_MULTI_CPUS=2    CPUs advertised by each of n1/n2
#   cred_expire=5, KillWait=2, sched/bf intervals of 2 s: a requeued job restarts in seconds, not minutes
#
# Its own state (slurmctld's StateSaveLocation, each slurmd's spool) lives under /var/spool/$CLUSTER, and
# the accounting DB user's password is set even when the user exists: a machine that ran another
# single-node SLURM before (its state in /var/spool/slurmctld, its own `slurm` DB user) still comes up.
#
# Run as root. Stop with .ci/slurm-down.sh.
set -euo pipefail

CPUS=${CANCELCTL_SLURM_CPUS:-8}
MAX_ARRAY=${CANCELCTL_SLURM_MAX_ARRAY:-8}
MULTI_CPUS=${CANCELCTL_SLURM_MULTI_CPUS:-2}
# the multi-node partition: name -> loopback address and slurmd port
MULTI_NODES=(n1 n2)
declare -A MULTI_ADDR=([n1]=127.0.1.1 [n2]=127.0.1.2) MULTI_PORT=([n1]=17001 [n2]=17002)
WAIT_S=${CANCELCTL_SLURM_WAIT_S:-60}
CLUSTER=cancelctl-ci
# this cluster's own state: slurmctld refuses another cluster's (CLUSTER NAME MISMATCH) and stops at once
STATE=/var/spool/$CLUSTER
OLD_STATE=/var/spool/slurmctld  # where this script kept slurmctld's state before it had a folder of its own
DB_USER=slurm
DB_PASS=cancelctl-ci
NODE=$(hostname -s)
LOG=/var/log/slurm
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
DB_SOCKET=/run/mysqld/mysqld.sock
t0=$(date +%s)

say() { echo "[slurm-up +$(( $(date +%s) - t0 ))s] $*" >&2; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {  # wait_for <seconds> <what> <command...>: poll every 0.2 s, fail loudly on timeout
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $(( limit * 5 ))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  say "timed out after ${limit}s waiting for $what"; return 1
}
stop_pidfile() {  # stop_pidfile <pidfile>: SIGTERM, wait up to 10 s
  alive "$1" || return 0
  local pid; pid=$(cat "$1"); kill "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}

# ------------------------------------------------------------------ packages (only what is missing)
missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
command -v slurmdbd >/dev/null || missing+=(slurmdbd)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
ls /usr/lib/*/slurm-wlm/accounting_storage_mysql.so >/dev/null 2>&1 || missing+=(slurm-wlm-mysql-plugin)
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  # postinst scripts cannot start services here (no systemd): everything is started below
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p /etc/slurm "$STATE/slurmctld" "$STATE/slurmd" "$LOG" /run/munge /var/lib/munge /var/log/munge /run/mysqld
chown munge:munge /run/munge /var/lib/munge /var/log/munge
chown mysql:mysql /run/mysqld

# ------------------------------------------------------------------ munge (authentication)
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key; chmod 0600 /etc/munge/munge.key
munge_ok() { munge -n | unmunge; }
if ! munge_ok >/dev/null 2>&1; then
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged --force   # --force: a stale socket from an unclean stop
  wait_for 10 munged munge_ok
fi

# ------------------------------------------------------------------ slurm.conf (sacctmgr reads it too)
MEM=$(( $(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') * 95 / 100 ))
NEW_CONF=$(cat <<EOF
# written by cancelctl .ci/slurm-up.sh: one node, no cgroups, no systemd
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may only start again cred_expire seconds after it stopped (default 120)
AuthInfo=cred_expire=5
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# keep --comment (cancelctl writes the sweep and run ids there) in the accounting DB
AccountingStoreFlags=job_comment
SchedulerType=sched/backfill
# defaults (batch_sched_delay=3, sched_interval=60, bf_interval=30) cost seconds per wave of short
# jobs and up to a minute before a requeued job starts again
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MaxArraySize=$MAX_ARRAY
ReturnToService=2
# seconds between SIGTERM and SIGKILL on scancel/requeue (submitit's job ignores SIGTERM)
KillWait=2
StateSaveLocation=$STATE/slurmctld
# %n = the node name: several slurmd run on this machine (multiple-slurmd mode), one per node
SlurmdSpoolDir=$STATE/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
# advertise more CPUs than the VM has, so several tiny array tasks run at once
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
$(for n in "${MULTI_NODES[@]}"; do
  echo "NodeName=$n NodeAddr=${MULTI_ADDR[$n]} Port=${MULTI_PORT[$n]} CPUs=$MULTI_CPUS RealMemory=$MEM State=UNKNOWN"
done)
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=multi Nodes=$(IFS=,; echo "${MULTI_NODES[*]}") Default=NO MaxTime=INFINITE State=UP
EOF
)
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
  say "writing $CONF (restarting slurmctld/slurmd if running: both must hash the same config)"
  printf '%s\n' "$NEW_CONF" >"$CONF"
  for pidfile in /run/slurmd.pid /run/slurmd-*.pid; do stop_pidfile "$pidfile"; done  # slurmd.pid: before %n
  stop_pidfile /run/slurmctld.pid
fi

# ------------------------------------------------------------------ MariaDB + slurmdbd (sacct)
db_ok() { mariadb-admin --socket=$DB_SOCKET ping; }
if ! db_ok >/dev/null 2>&1; then
  say "starting mariadbd"
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  nohup /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid --socket=$DB_SOCKET \
    --bind-address=127.0.0.1 --innodb-buffer-pool-size=256M --innodb-lock-wait-timeout=900 \
    >"$LOG/mariadb.log" 2>&1 </dev/null &
  wait_for 30 mariadbd db_ok
fi
# ALTER USER: a `slurm` user made earlier by other means keeps its old password through CREATE ... IF
# NOT EXISTS, and slurmdbd would then stop on "Access denied for user 'slurm'"
mariadb --socket=$DB_SOCKET -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
  ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
  GRANT ALL ON slurm_acct_db.* TO '$DB_USER'@'localhost'; FLUSH PRIVILEGES;"
cat >"$DBD_CONF" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=$DB_USER
StoragePass=$DB_PASS
EOF
chmod 0600 "$DBD_CONF"   # slurmdbd refuses a readable config (it holds the DB password)
if ! alive /run/slurmdbd.pid; then
  say "starting slurmdbd"
  slurmdbd
  wait_for 30 slurmdbd sacctmgr -n list cluster
fi

# ------------------------------------------------------------------ slurmctld + slurmd
if ! alive /run/slurmctld.pid; then
  if [ ! -e "$STATE/slurmctld/clustername" ] && [ "$(cat "$OLD_STATE/clustername" 2>/dev/null)" = "$CLUSTER" ]; then
    # this cluster's state from before it had a folder of its own: its queue and job-id counter go on
    # (a fresh counter would reuse job ids that slurmdbd already holds)
    say "copying $CLUSTER's slurmctld state from $OLD_STATE to $STATE/slurmctld"
    cp -a "$OLD_STATE/." "$STATE/slurmctld/"
  fi
  say "starting slurmctld"; slurmctld
fi
wait_for 30 slurmctld scontrol ping
for node in "$NODE" "${MULTI_NODES[@]}"; do
  mkdir -p "$STATE/slurmd/$node"
  if ! alive "/run/slurmd-$node.pid"; then say "starting slurmd -N $node"; slurmd -N "$node"; fi
done

node_ready() {  # node_ready <node>
  local state; state=$(sinfo -h -n "$1" -o '%T' | head -1)
  case "$state" in
    idle|mixed|allocated) return 0 ;;
    down*|drain*) scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1; return 1 ;;
    *) return 1 ;;
  esac
}
for node in "$NODE" "${MULTI_NODES[@]}"; do
  if ! wait_for "$WAIT_S" "node $node idle (see $LOG/slurmctld.log, $LOG/slurmd-$node.log)" node_ready "$node"; then
    sinfo >&2 || true; exit 1
  fi
done
# the cluster registers in slurmdbd when slurmctld connects; sacct needs that
wait_for 30 "cluster $CLUSTER in slurmdbd" bash -c "sacctmgr -n -P list cluster format=cluster | grep -qx $CLUSTER"
say "ready: $(sinfo -h -o '%P %a %D %T %N'), MaxArraySize=$(scontrol show config | awk '/^MaxArraySize/{print $3}')"
