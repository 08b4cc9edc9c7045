#!/usr/bin/env bash
# Stops the private Slurm started by tests/launch/slurm-up.sh [DIR] (default /tmp/kindling-slurm):
# cancels its jobs, then stops slurmd, slurmctld and munged. Idempotent: exits 0 when nothing
# runs. munged is left alone if it was already running before slurm-up.sh first used it
# (marker DIR/run/munged.preexisting), i.e. if it belongs to a real Slurm/munge installation.
set -euo pipefail
if [ "$(id -u)" -ne 0 ] && sudo -n true 2>/dev/null; then exec sudo -n "$0" "$@"; fi

dir="${1:-/tmp/kindling-slurm}"
[ -d "$dir" ] && dir="$(cd "$dir" && pwd -P)"
conf="$dir/slurm.conf"

log() { echo "slurm-down: $*"; }

# shellcheck source=tests/launch/slurm-lib.sh
. "$(dirname "$0")/slurm-lib.sh"

# TERM, wait up to 10 s, then KILL.
stop_pids() { # $1 = label, rest = pids
  local label="$1" pid i alive
  shift
  [ $# -gt 0 ] || return 0
  log "stopping $label (pid $*)"
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    alive=0
    for pid in "$@"; do [ -d "/proc/$pid" ] && alive=1; done
    [ "$alive" -eq 1 ] || return 0
    sleep 0.1
  done
  log "$label did not exit after SIGTERM, sending SIGKILL"
  kill -KILL "$@" 2>/dev/null || true
}

# Pids of daemon $1 that belong to this DIR: the pid file, plus any process started with our
# config (covers a lost pid file). Never matches a daemon of another Slurm installation.
daemon_pids() { # $1 = name
  local p
  {
    live_pid "$dir/run/$1.pid" "$1" || true
    if [ -f "$conf" ]; then
      for p in $(pgrep -x "$1" || true); do
        if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "-f $conf"; then echo "$p"; fi
      done
    fi
  } | sort -u
}

# Cancel jobs first so slurmd can clean up their steps (best effort, bounded).
ctld_running="$(daemon_pids slurmctld)"
if [ -n "$ctld_running" ] && [ -f "$conf" ] && command -v scancel >/dev/null 2>&1; then
  if [ -n "$(SLURM_CONF="$conf" timeout 5 squeue -h -o %i 2>/dev/null || true)" ]; then
    log "cancelling jobs"
    SLURM_CONF="$conf" timeout 5 scancel --full --quiet --user=all 2>/dev/null ||
      SLURM_CONF="$conf" timeout 5 scancel --quiet --state=RUNNING 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [ -z "$(SLURM_CONF="$conf" timeout 5 squeue -h -o %i 2>/dev/null || true)" ] && break
      sleep 0.2
    done
  fi
fi

# shellcheck disable=SC2046  # word splitting of pid lists is intended
stop_pids slurmd $(daemon_pids slurmd)
# Step daemons of our slurmd outlive it if their tasks hang; kill them only if no other slurmd
# (of another installation) could own them.
if [ -z "$(pgrep -x slurmd || true)" ]; then
  # shellcheck disable=SC2046
  stop_pids slurmstepd $(pgrep -x slurmstepd || true)
fi
# shellcheck disable=SC2046
stop_pids slurmctld $(daemon_pids slurmctld)
rm -f "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid"

if [ -f "$dir/run/munged.preexisting" ]; then
  log "leaving munged running (it was running before slurm-up.sh)"
else
  # shellcheck disable=SC2046
  stop_pids munged $(live_pid /run/munge/munged.pid munged || true)
  # Without a pid file, only a munged started by slurm-up.sh may be hunted down by name.
  if [ -f "$dir/run/munged.started" ]; then
    # shellcheck disable=SC2046
    stop_pids munged $(pgrep -x -u munge munged || true)
  fi
  rm -f "$dir/run/munged.started"
fi

log "done"
