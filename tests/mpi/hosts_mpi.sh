#!/usr/bin/env bash
# tests/mpi/hosts_mpi.sh — `mxtrain train` across hosts (docs/distributed.md, "Running on
# several machines"): two hosts as network namespaces joined by a switch
# (support/netns_lib.sh), mpirun started on host0 with a hostfile of their addresses and a
# remote-shell agent in place of ssh, Open MPI restricted to TCP on the hosts' network
# (`--mca btl tcp,self`, btl_tcp_if_include / oob_tcp_if_include).
#   fsdp     FSDP on 4 ranks, two per host (ranks 0, 1 on host0)
#   tp2dp2   tp 2 x dp 2 on 4 ranks, two per host (each tp group on one host, dp across)
#   ep2      ep 2 on the MoE test model, one rank per host
# Each gives the same per-step losses and gradient norms, bit for bit, as the same layout on
# one host (plain mpirun, shared memory between the ranks): the same ranks run the same
# collective algorithms (Open MPI's coll/tuned picks them from the communicator and message
# sizes, not from the transport), so every sum adds in the same order. The runs are bf16,
# where these layouts are not one process's bits (the sums over ranks are added in another
# order than one process's: docs/distributed.md), so another order across hosts would show.
# The job's own Open MPI
# log (btl_base_verbose) shows that every rank initialised only the tcp and self transports,
# its TCP on eth0 of its own host, and no shared memory (vader), which the one-host run
# does initialise (the check can fail).
#   cutoff   FSDP, one rank per host, with Open MPI's TCP keepalive on the launch connections
#            set as docs/distributed.md advises; once training runs, host1's cable is pulled
#            (its switch port taken down). mpirun finds host1's daemon unreachable and ends
#            the job non-zero within 60 s (measured); nothing is left running on host1.
#   cutoff_watchdog  the same with a collective watchdog bound (8 s) shorter than the
#            keepalive's detection and the hosts' TCP retransmission limit lowered
#            (net.ipv4.tcp_retries2 = 6): the watchdog ends the job, naming the collective,
#            and mpirun, whose messages to host1 are then in flight, exits within 60 s.
# Runs as root where network namespaces can be made; elsewhere exits 77 (CTest: not run) with
# the reason. Every process in the namespaces is killed and the namespaces removed on exit.
# Usage: hosts_mpi.sh MXTRAIN MPIEXEC fsdp|tp2dp2|ep2|cutoff|cutoff_watchdog   (CTest
# `mpi_hosts_CASE`)
source "$(dirname "$0")/support/train_lib.sh"
source "$(dirname "$0")/support/netns_lib.sh"
case_name=${3:?usage: hosts_mpi.sh MXTRAIN MPIEXEC fsdp|tp2dp2|ep2|cutoff|cutoff_watchdog}
netns_require
netns_up 2
cfg=$DATA/mpi_tiny.yaml
steps=10

# same_bits A B LABEL: the same `loss` and `grad_norm` text on every step (the metrics print
# each value with all its digits, so the same text is the same bits).
same_bits() {
  local key
  for key in loss grad_norm; do
    [ "$(field "$1" "$key" | wc -l)" -eq "$steps" ] || { echo "FAIL $3: not $steps $key values"; exit 1; }
    diff <(field "$1" "$key") <(field "$2" "$key") > "$TMP/diff.txt" ||
      { cat "$TMP/diff.txt"; echo "FAIL $3: $key differs from one host"; exit 1; }
  done
  echo "ok $3: $steps losses and gradient norms equal one host's bit for bit (last loss $(field "$2" loss | tail -1))"
}

# tcp_only LOG NP PER_HOST: NP ranks initialised tcp and self and nothing else, PER_HOST of
# them on each host, each with TCP on its own host's address.
tcp_only() {
  local log=$1 np=$2 per=$3 i
  grep -q "vader\|btl component sm\b" "$log" && { grep "vader" "$log" | head -3; echo "FAIL: shared memory initialised"; exit 1; }
  [ "$(grep -c "select: initializing btl component tcp$" "$log")" -eq "$np" ] &&
    [ "$(grep -c "select: initializing btl component self$" "$log")" -eq "$np" ] &&
    [ "$(grep -c "select: initializing btl component" "$log")" -eq $((2 * np)) ] ||
    { grep "select: initializing" "$log"; echo "FAIL: not tcp and self alone on $np ranks"; exit 1; }
  for ((i = 0; i < NETNS_HOSTS; i++)); do
    [ "$(grep -c "^\[host$i:[0-9]*\] btl: tcp: Found match: $NET.$((i + 1)) (eth0)" "$log")" -eq "$per" ] ||
      { grep "Found match" "$log"; echo "FAIL: host$i does not run $per rank(s) on $NET.$((i + 1))"; exit 1; }
  done
  echo "ok: $np ranks, $per per host, each on TCP over its host's eth0 alone (no shared memory)"
}

# across NP LABEL [ARGS...]: the run on one host (shared memory) and across the hosts, compared.
across() {
  local np=$1 label=$2 map=()
  shift 2
  [ "$np" -eq 2 ] && map=(--map-by node)  # one rank per host; 4 ranks fill host0's 2 slots first
  timeout 300 "$MPIEXEC" --oversubscribe -np "$np" --mca btl_base_verbose 100 "$BIN" train \
    --config "$cfg" --steps $steps --quiet --metrics-out "$TMP/one.jsonl" "$@" > "$TMP/one.log" 2>&1 ||
    { cat "$TMP/one.log"; echo "FAIL $label: the run on one host failed"; exit 1; }
  grep -q "select: initializing btl component vader" "$TMP/one.log" ||
    { echo "FAIL: the one-host run did not use shared memory: the transport check is void"; exit 1; }
  hosts_mpirun -np "$np" "${map[@]}" --mca btl_base_verbose 100 "$BIN" train --config "$cfg" \
    --steps $steps --quiet --metrics-out "$TMP/hosts.jsonl" "$@" > "$TMP/hosts.log" 2>&1 ||
    { cat "$TMP/hosts.log"; echo "FAIL $label: the run across hosts failed"; exit 1; }
  tcp_only "$TMP/hosts.log" "$np" $((np / NETNS_HOSTS))
  same_bits "$TMP/one.jsonl" "$TMP/hosts.jsonl" "$label across 2 hosts"
}

# cut_host1 EXPECTED: FSDP, one rank per host, Open MPI's keepalive on the launch connections
# as docs/distributed.md advises; once training runs, host1's cable is pulled. mpirun must end
# non-zero within 60 s with EXPECTED in its output, and host1's processes must be gone
# (its daemon finds mpirun unreachable too) within 60 s of the cut.
cut_host1() {
  local expected=$1 launcher t0 took rc=0
  HOSTS_MPI_FLAGS+=(--mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5
                    --mca oob_tcp_keepalive_probes 3)
  hosts_mpirun -np 2 --map-by node "$BIN" train --config "$cfg" --fsdp --quiet --steps 100000 \
    --metrics-out "$TMP/m.jsonl" > "$TMP/out.txt" 2>&1 &
  launcher=$!
  for _ in $(seq 240); do  # training has started once a step is in the metrics
    grep -q '"loss"' "$TMP/m.jsonl" 2> /dev/null && break
    kill -0 $launcher 2> /dev/null || { cat "$TMP/out.txt"; echo "FAIL: run ended early"; exit 1; }
    sleep 0.5
  done
  grep -q '"loss"' "$TMP/m.jsonl" || { echo "FAIL: no training step within 120 s"; exit 1; }
  host_link 1 down
  t0=$(date +%s.%N)
  since_cut() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
  while kill -0 $launcher 2> /dev/null && awk -v t="$(since_cut)" 'BEGIN { exit !(t < 90) }'; do
    sleep 0.2
  done
  took=$(since_cut)
  if kill -0 $launcher 2> /dev/null; then
    cat "$TMP/out.txt"; echo "FAIL: mpirun still running $took s after host1 was cut off"; exit 1
  fi
  wait $launcher || rc=$?
  cat "$TMP/out.txt"
  [ "$rc" -ne 0 ] || { echo "FAIL: mpirun exited 0 after host1 was cut off"; exit 1; }
  awk -v t="$took" 'BEGIN { exit !(t <= 60) }' ||
    { echo "FAIL: the job ended $took s after host1 was cut off, not within 60 s"; exit 1; }
  grep -qF "$expected" "$TMP/out.txt" || { echo "FAIL: no \"$expected\" in the output"; exit 1; }
  echo "ok $case_name: mpirun exited with status $rc $took s after host1 was cut off"
  while [ -n "$(ip netns pids "${P}h1")" ] && awk -v t="$(since_cut)" 'BEGIN { exit !(t < 60) }'; do
    sleep 0.5
  done
  [ -z "$(ip netns pids "${P}h1")" ] ||
    { echo "FAIL: host1 still runs $(ip netns pids "${P}h1" | xargs ps -o comm= -p | xargs) 60 s after the cut"; exit 1; }
  echo "ok $case_name: nothing left running on host1 $(since_cut) s after the cut"
}

case $case_name in
  fsdp) across 4 "FSDP" --fsdp --recipe bf16 ;;
  tp2dp2) across 4 "tp 2 x dp 2" --tp 2 --recipe bf16 ;;
  ep2) cfg=$DATA/mpi_tiny_moe.yaml; across 2 "ep 2" --ep 2 --recipe bf16 ;;
  cutoff)
    cut_host1 "ORTE has lost communication with a remote daemon" ;;
  cutoff_watchdog)
    for ((i = 0; i < NETNS_HOSTS; i++)); do
      ip netns exec "${P}h$i" sh -c 'echo 6 > /proc/sys/net/ipv4/tcp_retries2'
    done
    export MXTRAIN_COLLECTIVE_TIMEOUT=8
    HOSTS_MPI_FLAGS+=(-x MXTRAIN_COLLECTIVE_TIMEOUT)
    cut_host1 "rank 0: error: collective watchdog: " ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
