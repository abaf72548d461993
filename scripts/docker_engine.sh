#!/usr/bin/env bash
# The test Docker engine: Debian's dockerd on a private socket (vfs storage, no iptables), so the
# tests never touch a system engine and need no registry. Installs docker.io when dockerd is
# missing (as root). Reuses an engine that already answers on the socket.
# Usage: scripts/docker_engine.sh start|stop|status
#   start   prints DOCKER_HOST=unix://... on stdout once the engine answers
#   stop    stops the engine this script started (its pidfile), waits for it to exit
# The directory is $TORCHX_EXT_DOCKER_DIR (default /tmp/torchx-ext-docker).
set -euo pipefail
dir="${TORCHX_EXT_DOCKER_DIR:-/tmp/torchx-ext-docker}"
socket="$dir/docker.sock"
host="unix://$socket"
pidfile="$dir/docker.pid"
answers() { DOCKER_HOST="$host" timeout 10 docker version >/dev/null 2>&1; }

case "${1:-}" in
  start)
    if command -v docker >/dev/null && answers; then echo "DOCKER_HOST=$host"; exit 0; fi
    if ! command -v dockerd >/dev/null; then
      if [ "$(id -u)" != 0 ]; then
        echo "docker_engine.sh: dockerd is missing; as root: apt-get install docker.io" >&2; exit 1
      fi
      echo "docker_engine.sh: installing Debian's docker.io" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q --no-install-recommends docker.io >&2 \
        || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends docker.io >&2; }
    fi
    if [ "$(id -u)" != 0 ]; then echo "docker_engine.sh: dockerd needs root here" >&2; exit 1; fi
    mkdir -p "$dir"
    # A previous engine killed without cleaning up leaves its pidfile and socket behind, and
    # dockerd refuses to start over a pidfile whose process still exists.
    if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
    rm -f "$socket"
    # Without iptables the containers have no route out, so a name the engine's own DNS does not
    # know (c10d's reverse lookup of ::ffff:127.0.0.1 in every rendezvous) waits for an upstream
    # resolver that never answers: 10 s with the resolver's defaults, 1 s with these options.
    # The last engine's log is kept beside the new one: what a failed run's engine said stays readable.
    if [ -s "$dir/dockerd.log" ]; then mv -f "$dir/dockerd.log" "$dir/dockerd.log.1"; fi
    nohup dockerd --host "$host" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$pidfile" \
      --storage-driver=vfs --iptables=false --dns-opt timeout:1 --dns-opt attempts:1 >"$dir/dockerd.log" 2>&1 &
    echo $! >"$dir/started-by-script"
    for _ in $(seq 60); do
      if answers; then echo "DOCKER_HOST=$host"; exit 0; fi
      sleep 1
    done
    echo "docker_engine.sh: dockerd did not answer on $socket within 60 s; its log ends:" >&2
    tail -20 "$dir/dockerd.log" >&2
    exit 1
    ;;
  stop)
    [ -f "$dir/started-by-script" ] || exit 0
    pid="$(cat "$dir/started-by-script")"
    rm -f "$dir/started-by-script"
    kill "$pid" 2>/dev/null || exit 0
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    ;;
  status)
    if answers; then echo "DOCKER_HOST=$host (answering)"; else echo "no engine answers on $socket"; exit 1; fi
    ;;
  *) echo "usage: scripts/docker_engine.sh start|stop|status" >&2; exit 2 ;;
esac
