#!/usr/bin/env bash
# A real two-node Slurm on this host, for the slurm scheduler's tests: Debian's slurm-wlm and
# munge (installed when missing, as root), a controller and two slurmd (`slurmd -N node1`,
# `-N node2`) with ports of their own and NodeAddr=127.0.0.1, so node names do not resolve, as
# on many real clusters. proctrack/linuxproc and task/affinity: no systemd or cgroups needed.
# With accounting (the default), slurmdbd on a private MariaDB; without it, a short MinJobAge
# so that the controller forgets finished jobs within seconds.
# GPUs without hardware: each node offers gpu:h100:8 (AutoDetect=off, File= eight /dev/tty
# device nodes, as Slurm's own test suite does), and is described as two sockets of half its
# CPUs; gres.conf puts GPUs 0-2 and 4 next to socket 0 and 3, 5-7 next to socket 1, as on
# tests/fixtures/sysfs/gpu-2socket-8 (PCI order is not NUMA order there for GPUs 3 and 4).
# Jobs then get CUDA_VISIBLE_DEVICES as on a GPU cluster.
# Usage: scripts/slurm_cluster.sh start [--no-accounting] | stop | status
#   start   prints SLURM_CONF=... on stdout once both nodes are idle (the tests read it)
#   stop    stops every daemon this script started and waits for them to exit
# The directory is $TORCHX_EXT_SLURM_DIR (default /tmp/torchx-ext-slurm).
set -euo pipefail
dir="${TORCHX_EXT_SLURM_DIR:-/tmp/torchx-ext-slurm}"
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"
ctld_port=16817
dbd_port=16819
db_port=16306
cluster=torchxext
say() { echo "slurm_cluster.sh: $*" >&2; }
answers() { timeout 10 sinfo -h -o %T >/dev/null 2>&1; }

install_missing() {
  local wanted=(slurm-wlm munge)
  [ "$1" = yes ] && wanted+=(slurmdbd mariadb-server)
  local missing=()
  for package in "${wanted[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then say "missing ${missing[*]}; as root: apt-get install ${missing[*]}"; exit 1; fi
  say "installing Debian's ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${missing[@]}" >&2 || { apt-get update -q >&2 && apt-get install -y -q "${missing[@]}" >&2; }
}

write_conf() {
  local accounting="$1" cpus memory
  cpus="$(nproc)"
  # Both nodes share this host's memory: each offers a third of it.
  memory=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / 3 ))
  mkdir -p "$dir/ctld" "$dir/spool" "$dir/log"
  {
    echo "ClusterName=$cluster"
    echo "SlurmctldHost=$(hostname)(127.0.0.1)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$dir/ctld"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/affinity"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core_Memory"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "UnkillableStepTimeout=30"
    echo "SchedulerParameters=sched_interval=2"
    echo "JobAcctGatherType=jobacct_gather/none"
    if [ "$accounting" = yes ]; then
      echo "AccountingStorageType=accounting_storage/slurmdbd"
      echo "AccountingStorageHost=127.0.0.1"
      echo "AccountingStoragePort=$dbd_port"
      echo "MinJobAge=300"
    else
      echo "AccountingStorageType=accounting_storage/none"
      echo "MinJobAge=5"
    fi
    echo "GresTypes=gpu"
    local shape="CPUs=$cpus"
    [ $((cpus % 2)) -eq 0 ] && shape="CPUs=$cpus Sockets=2 CoresPerSocket=$((cpus / 2)) ThreadsPerCore=1"
    for node in 1 2; do
      echo "NodeName=node$node NodeAddr=127.0.0.1 Port=$((17000 + node)) $shape Gres=gpu:h100:8 RealMemory=$memory State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP"
  } >"$conf"
}

write_gres_conf() {
  local cpus half devices=() socket gpu
  cpus="$(nproc)"
  half=$((cpus / 2))
  for device in /dev/tty[0-9] /dev/tty[0-9][0-9]; do
    [ -c "$device" ] && devices+=("$device")
    [ ${#devices[@]} -eq 8 ] && break
  done
  if [ ${#devices[@]} -lt 8 ]; then say "fake GPUs need eight /dev/ttyN device nodes; found ${devices[*]:-none}"; exit 1; fi
  {
    echo "AutoDetect=off"
    for gpu in 0 1 2 3 4 5 6 7; do
      socket=0
      case "$gpu" in 3|5|6|7) socket=1 ;; esac
      if [ "$half" -ge 1 ] && [ $((cpus % 2)) -eq 0 ]; then
        cores="$((socket * half))-$((socket * half + half - 1))"
      else
        cores="0-$((cpus - 1))"
      fi
      echo "Name=gpu Type=h100 File=${devices[$gpu]} Cores=$cores"
    done
  } >"$dir/gres.conf"
}

start_munge() {
  # Debian's munged on its usual socket (every Slurm client looks there); as root it needs
  # --force. One that already answers (a real install's) is used as it is.
  munge -n >/dev/null 2>&1 && return 0
  mkdir -p /run/munge "$dir/munge"
  [ -f /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  munged --force --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
}

start_database() {
  local data="$dir/mysql"
  if [ ! -d "$data/mysql" ]; then
    mkdir -p "$data"
    mariadb-install-db --datadir="$data" --user=root --auth-root-authentication-method=normal >"$dir/log/mariadb-install.log" 2>&1
  fi
  setsid mariadbd --datadir="$data" --user=root --port=$db_port --bind-address=127.0.0.1 \
    --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/log/mariadb.log" \
    --skip-name-resolve >/dev/null 2>&1 &
  for _ in $(seq 100); do
    mariadb --socket="$dir/mysqld.sock" -uroot -e 'select 1' >/dev/null 2>&1 && break
    sleep 0.2
  done
  mariadb --socket="$dir/mysqld.sock" -uroot -e \
    "create user if not exists 'slurm'@'127.0.0.1' identified by 'slurm'; grant all on slurm_acct_db.* to 'slurm'@'127.0.0.1';"
  {
    echo "AuthType=auth/munge"
    # slurmdbd checks DbdHost against this host's name; it listens on DbdAddr.
    echo "DbdHost=$(hostname -s)"
    echo "DbdAddr=127.0.0.1"
    echo "DbdPort=$dbd_port"
    echo "SlurmUser=root"
    echo "PidFile=$dir/slurmdbd.pid"
    echo "LogFile=$dir/log/slurmdbd.log"
    echo "StorageType=accounting_storage/mysql"
    echo "StorageHost=127.0.0.1"
    echo "StoragePort=$db_port"
    echo "StorageUser=slurm"
    echo "StoragePass=slurm"
    echo "StorageLoc=slurm_acct_db"
  } >"$dir/slurmdbd.conf"
  chmod 600 "$dir/slurmdbd.conf"
  # slurmdbd reads slurmdbd.conf next to $SLURM_CONF.
  slurmdbd
  for _ in $(seq 100); do
    sacctmgr -n list cluster >/dev/null 2>&1 && break
    sleep 0.2
  done
  sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw "$cluster" \
    || sacctmgr -i add cluster "$cluster" >&2 || { say "slurmdbd did not answer; see $dir/log/slurmdbd.log"; exit 1; }
}

stop_pidfile() {
  local pidfile="$1" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  rm -f "$pidfile"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

stop_all() {
  for pidfile in "$dir"/slurmd-node*.pid "$dir/slurmctld.pid" "$dir/slurmdbd.pid" "$dir/mysqld.pid" "$dir/munge/munged.pid"; do
    stop_pidfile "$pidfile"
  done
  # Steps of jobs still running when the nodes stopped.
  pkill -f "slurmstepd: \[" 2>/dev/null || true
}

case "${1:-}" in
  start)
    accounting=yes
    [ "${2:-}" = "--no-accounting" ] && accounting=no
    if [ -f "$conf" ] && answers; then
      if grep -q "accounting_storage/slurmdbd" "$conf"; then running=yes; else running=no; fi
      if [ "$running" = "$accounting" ]; then echo "SLURM_CONF=$conf"; exit 0; fi
      stop_all
    fi
    install_missing "$accounting"
    if [ "$(id -u)" != 0 ]; then say "the test cluster's daemons need root here"; exit 1; fi
    stop_all
    # The controller's state stays (job ids go on from where they were, as on a real cluster;
    # the accounting database keeps every job by id).
    rm -rf "$dir/spool"
    write_conf "$accounting"
    write_gres_conf
    start_munge
    [ "$accounting" = yes ] && start_database
    slurmctld -i
    for node in node1 node2; do slurmd -N "$node"; done
    # Jobs the controller recovered belong to the cluster's previous life (their processes died
    # with its nodes); one saved as running would keep its node "mix" and never idle.
    stale=""
    for _ in $(seq 50); do stale="$(squeue -h -o %i 2>/dev/null)" && break; sleep 0.2; done
    [ -n "$stale" ] && { say "cancelling jobs left from an earlier start: $(echo $stale)"; scancel $stale || true; }
    for _ in $(seq 300); do
      idle="$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$' || true)"
      [ "$idle" = 2 ] && { echo "SLURM_CONF=$conf"; exit 0; }
      sleep 0.2
    done
    say "the nodes did not become idle; see $dir/log"
    sinfo -N >&2 || true
    exit 1
    ;;
  stop) stop_all ;;
  status)
    if [ -f "$conf" ] && answers; then sinfo -N; else say "not running"; exit 1; fi
    ;;
  *) echo "usage: $0 start [--no-accounting] | stop | status" >&2; exit 2 ;;
esac
