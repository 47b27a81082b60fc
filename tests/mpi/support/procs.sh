# tests/mpi/support/procs.sh — finding an MPI rank's process under mpirun (sourced by
# train_lib.sh and scripts/soak.sh, not run).
#
# rank_pid LAUNCHER RANK [SECONDS]: the PID of world rank RANK among LAUNCHER's descendants
# (mpirun starts its local ranks as children; a wrapper in between is looked through), read
# from each process's environment (OMPI_COMM_WORLD_RANK). Looks again every 0.1 s for up to
# SECONDS (default 10) while LAUNCHER lives; status 1, printing nothing, when it is not found.
rank_pid() {
  local launcher=$1 rank=$2 tries=$(( ${3:-10} * 10 )) pid level next
  while :; do
    level=$launcher
    while [ -n "$level" ]; do
      next=
      for pid in $level; do
        if [ "$pid" != "$launcher" ] && tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null |
             grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
          echo "$pid"
          return 0
        fi
        next="$next $(pgrep -P "$pid" | tr '\n' ' ')"
      done
      level=$(echo $next)
    done
    [ "$tries" -gt 0 ] && kill -0 "$launcher" 2>/dev/null || return 1
    tries=$((tries - 1))
    sleep 0.1
  done
}

# show_procs LAUNCHER: LAUNCHER (if alive) and its descendants, for a failure's message.
show_procs() {
  kill -0 "$1" 2>/dev/null || { echo "the launcher ($1) has exited"; return 0; }
  local all=$1 level=$1 pid next
  while [ -n "$level" ]; do
    next=
    for pid in $level; do next="$next $(pgrep -P "$pid" | tr '\n' ' ')"; done
    level=$(echo $next)
    all="$all $level"
  done
  echo "processes under the launcher ($1):"
  ps -o pid,ppid,stat,etime,args -p "$(echo $all | tr ' ' ',')" || true
}
