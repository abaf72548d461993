#!/usr/bin/env bash
# The test image registry: Debian's docker-registry (the CNCF distribution registry) on a loopback
# port, with its storage under a private directory, for the workspace tests (images pushed by the
# test Docker engine and pulled by the test Kubernetes cluster's kubelet). Docker treats a loopback
# registry as insecure by default, so no TLS is needed. Installs docker-registry when missing (as
# root). Reuses a registry that already answers on the port.
# Usage: scripts/registry.sh start|stop|status
#   start   prints TORCHX_EXT_REGISTRY=127.0.0.1:PORT on stdout once the registry answers
#   stop    stops the registry this script started, and removes its storage
# The directory is $TORCHX_EXT_REGISTRY_DIR (default /tmp/torchx-ext-registry); the port
# $TORCHX_EXT_REGISTRY_PORT (default 5055).
set -euo pipefail
dir="${TORCHX_EXT_REGISTRY_DIR:-/tmp/torchx-ext-registry}"
port="${TORCHX_EXT_REGISTRY_PORT:-5055}"
address="127.0.0.1:$port"
answers() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(f"http://{sys.argv[1]}/v2/", timeout=5)' "$address" \
    >/dev/null 2>&1
}

case "${1:-}" in
  start)
    if answers; then echo "TORCHX_EXT_REGISTRY=$address"; exit 0; fi
    if ! command -v docker-registry >/dev/null; then
      if [ "$(id -u)" != 0 ]; then
        echo "registry.sh: docker-registry is missing; as root: apt-get install docker-registry" >&2; exit 1
      fi
      echo "registry.sh: installing Debian's docker-registry" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q --no-install-recommends docker-registry >&2 \
        || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends docker-registry >&2; }
    fi
    mkdir -p "$dir/storage"
    # delete.enabled: a test removes what it pushed (manifests by digest).
    cat >"$dir/config.yml" <<EOF
version: 0.1
storage:
  filesystem: {rootdirectory: $dir/storage}
  delete: {enabled: true}
http: {addr: "$address"}
EOF
    if [ -s "$dir/registry.log" ]; then mv -f "$dir/registry.log" "$dir/registry.log.1"; fi  # the last one's, kept
    nohup docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
    echo $! >"$dir/started-by-script"
    for _ in $(seq 50); do
      if answers; then echo "TORCHX_EXT_REGISTRY=$address"; exit 0; fi
      sleep 0.2
    done
    echo "registry.sh: the registry did not answer on $address within 10 s; its log ends:" >&2
    tail -20 "$dir/registry.log" >&2
    exit 1
    ;;
  stop)
    [ -f "$dir/started-by-script" ] || exit 0
    pid="$(cat "$dir/started-by-script")"
    rm -f "$dir/started-by-script"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    rm -rf "$dir/storage"
    ;;
  status)
    if answers; then echo "TORCHX_EXT_REGISTRY=$address (answering)"; else echo "no registry answers on $address"; exit 1; fi
    ;;
  *) echo "usage: scripts/registry.sh start|stop|status" >&2; exit 2 ;;
esac
