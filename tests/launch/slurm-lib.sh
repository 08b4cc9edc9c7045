# Shared by slurm-up.sh and slurm-down.sh (sourced, not run).

# Prints the pid in pid file $1 if that process is alive and its name is $2.
live_pid() {
  local pidfile="$1" name="$2" pid
  [ -f "$pidfile" ] || return 1
  pid="$(tr -dc '0-9' <"$pidfile")"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  echo "$pid"
}
