# tests/mpi/support/netns_lib.sh — "hosts" as Linux network namespaces on one machine, for the
# tests that run `mxtrain train` across hosts (tests/mpi/hosts_mpi.sh): sourced after
# train_lib.sh, not run.
#
# netns_up N makes N hosts and a switch:
#   <P>sw       a namespace holding the bridge br0 (the switch; its own namespace, so the
#               machine's own network and firewall rules are untouched)
#   <P>h0 ...   one namespace per host, with eth0 (a veth whose other end, p<i>, is a port of
#               br0) at $NET.<i+1>/24 and its own loopback
# and writes $TMP/hosts (a hostfile: one address per host, `slots=2`) and $TMP/agent, the
# remote-shell agent mpirun uses instead of ssh (plm_rsh_agent): `agent ADDRESS COMMAND...` runs
# COMMAND on that host as ssh would, in the host's namespace, under its own host name
# (a UTS namespace: host0, host1, ...) and with a clean environment (PATH and HOME only), so
# only what mpirun forwards (-x, OMPI_*) reaches the remote ranks. `hosts_mpirun ARGS...` runs
# mpirun on host0 (as one does on the first node of an allocation) over TCP alone (no shared
# memory, HOSTS_MPI_FLAGS). Every process in the namespaces is killed and the namespaces
# removed on exit, however the test ends (netns_down, from the EXIT trap).
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2; netns_require exits 77 (CTest's
# "not run") with the reason when the machine does not allow it.

P=mxt$$_  # namespace names: mxt<pid>_sw, mxt<pid>_h0, ...; the _ ends the PID
NET=10.213.7
NETNS_HOSTS=0

netns_require() {
  local why=
  if [ "$(id -u)" -ne 0 ]; then
    why="network namespaces need root (running as uid $(id -u))"
  elif ! command -v ip > /dev/null; then
    why="no ip command (Debian package iproute2)"
  elif ! command -v unshare > /dev/null; then
    why="no unshare command (util-linux)"
  elif ! ip netns add "${P}probe" 2> "$TMP/probe.err"; then
    why="cannot create a network namespace: $(head -1 "$TMP/probe.err")"
  elif ! ip -n "${P}probe" link add probe0 type veth peer name probe1 2> "$TMP/probe.err"; then
    why="cannot create a veth pair: $(head -1 "$TMP/probe.err")"
  elif ! ip netns exec "${P}probe" unshare --uts true 2> "$TMP/probe.err"; then
    why="cannot create a UTS namespace: $(head -1 "$TMP/probe.err")"
  fi
  ip netns del "${P}probe" 2> /dev/null || true
  if [ -n "$why" ]; then
    echo "not run: $why"
    exit 77
  fi
}

# netns_down: kills what runs in the namespaces (ranks, orted, mpirun), then removes them.
netns_down() {
  local ns pid
  for ns in $(ip netns list 2> /dev/null | awk -v p="$P" 'index($1, p) == 1 { print $1 }'); do
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$pid" 2> /dev/null || true; done
  done
  for ns in $(ip netns list 2> /dev/null | awk -v p="$P" 'index($1, p) == 1 { print $1 }'); do
    ip netns del "$ns" 2> /dev/null || true
  done
}

netns_up() {
  local n=$1 i
  trap 'netns_down; rm -rf "$TMP"' EXIT
  ip netns add "${P}sw"
  ip -n "${P}sw" link add br0 type bridge
  ip -n "${P}sw" link set br0 up
  : > "$TMP/hosts"
  for ((i = 0; i < n; i++)); do
    ip netns add "${P}h$i"
    ip -n "${P}sw" link add "p$i" type veth peer name eth0 netns "${P}h$i"
    ip -n "${P}sw" link set "p$i" master br0 up
    ip -n "${P}h$i" addr add "$NET.$((i + 1))/24" dev eth0
    ip -n "${P}h$i" link set eth0 up
    ip -n "${P}h$i" link set lo up
    echo "$NET.$((i + 1)) slots=2" >> "$TMP/hosts"
  done
  NETNS_HOSTS=$n
  cat > "$TMP/agent" << EOF
#!/bin/sh
# agent ADDRESS COMMAND...: COMMAND on the host at ADDRESS (namespace ${P}h<i>), as ssh runs it.
i=\${1#$NET.}
i=\$((i - 1))
[ "\$i" -ge 0 ] && [ "\$i" -lt $n ] 2> /dev/null || { echo "agent: no host \$1" >&2; exit 255; }
shift
exec ip netns exec "${P}h\$i" unshare --uts sh -c \
  'hostname "host\$0" && exec env -i PATH="\$PATH" HOME="\$HOME" sh -c "\$1"' "\$i" "\$*"
EOF
  chmod +x "$TMP/agent"
  mkdir -p "$TMP/ompi"
  # The hosts reach each other (a bridge port forwards a moment after it comes up): every
  # host's TCP port 1 answers, refusing the connection, from host0 within 10 s.
  local try answer
  for ((i = 1; i < n; i++)); do
    for try in $(seq 100); do
      answer=$(ip netns exec "${P}h0" bash -c "exec 3<> /dev/tcp/$NET.$((i + 1))/1" 2>&1 || true)
      [[ $answer == *refused* ]] && break
      [ "$try" -lt 100 ] || { echo "$answer"; echo "FAIL: host$i not reachable from host0"; exit 1; }
      sleep 0.1
    done
  done
}

# Open MPI between the hosts: TCP only (no shared memory), on the hosts' network only.
HOSTS_MPI_FLAGS=(--hostfile "$TMP/hosts" --mca plm_rsh_agent "$TMP/agent"
                 --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24"
                 --mca oob_tcp_if_include "$NET.0/24" --mca orte_tmpdir_base "$TMP/ompi"
                 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY)
# The sanitizer build's settings (scripts/sanitize.sh) reach the remote ranks only this way.
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
  [ -z "${!v:-}" ] || HOSTS_MPI_FLAGS+=(-x "$v")
done

# hosts_mpirun ARGS...: mpirun ARGS on host0 (working directory $TMP), at most 300 s.
hosts_mpirun() {
  ip netns exec "${P}h0" unshare --uts sh -c \
    'hostname host0 && cd "$0" && exec timeout 300 "$@"' "$TMP" \
    "$MPIEXEC" --allow-run-as-root "${HOSTS_MPI_FLAGS[@]}" "$@"
}

# host_link HOST up|down: plugs host HOST's cable into the switch, or pulls it.
host_link() { ip -n "${P}sw" link set "p$1" "$2"; }
