# shellcheck shell=bash
# Shared helpers for the network-namespace lab: three namespaces joined by two veth pairs,
#
#   cw-a-SUFFIX (eth0 198.18.0.1/24) <-> ra [cw-r-SUFFIX] rb <-> (eth0 198.18.0.2/24) cw-b-SUFFIX
#
# The router namespace's veths carry no address: whatever sits in cw-r (cakewalk on AF_PACKET,
# or a kernel bridge for a reference run) moves frames between ra and rb at layer 2, so the
# end hosts share one subnet and need no routes. Addresses come from the benchmarking range
# 198.18.0.0/15 (RFC 2544) and exist only inside these namespaces; nothing here touches the
# root namespace's interfaces. Sourced by scripts/lab/{setup,teardown,run} and by the benches.
#
# Every function takes the run's SUFFIX so several labs can exist at once.

LAB_IP_A=198.18.0.1
LAB_IP_B=198.18.0.2
LAB_PREFIX=24

lab_ns() { printf 'cw-%s-%s' "$1" "$2"; } # lab_ns ROLE SUFFIX  (ROLE = a | r | b)

lab_die() { echo "lab: error: $*" >&2; exit 1; }

lab_require() {
  [ "$(id -u)" = 0 ] || lab_die "network namespaces need root (CAP_NET_ADMIN); run with sudo"
  local t pkg
  for t in ip:iproute2 ethtool:ethtool "$@"; do
    pkg=${t#*:}
    command -v "${t%%:*}" >/dev/null 2>&1 || lab_die "'${t%%:*}' not found; apt-get install $pkg"
  done
}

# Turns off the offloads that make veths pass GRO/GSO super-frames and partial checksums, so
# every frame the router sees is a real, checksummed, MTU-sized frame.
lab_offloads_off() { # NS DEV
  ip netns exec "$1" ethtool -K "$2" tx off rx off tso off gso off gro off lro off >/dev/null 2>&1 ||
    ip netns exec "$1" ethtool -K "$2" tx off tso off gso off gro off >/dev/null
}

lab_setup() { # SUFFIX
  local s=$1 a r b
  a=$(lab_ns a "$s") r=$(lab_ns r "$s") b=$(lab_ns b "$s")
  ip netns add "$a" && ip netns add "$r" && ip netns add "$b" || return 1
  # Create each pair inside the router namespace and move one end out, so no interface ever
  # appears in the root namespace.
  ip -n "$r" link add ra type veth peer name eth0 netns "$a" || return 1
  ip -n "$r" link add rb type veth peer name eth0 netns "$b" || return 1
  local ns
  for ns in "$a" "$r" "$b"; do ip -n "$ns" link set lo up; done
  # The router's ports carry no IP traffic of their own (no IPv6 link-local chatter either).
  ip netns exec "$r" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip netns exec "$a" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
  ip netns exec "$b" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
  ip -n "$a" addr add "$LAB_IP_A/$LAB_PREFIX" dev eth0
  ip -n "$b" addr add "$LAB_IP_B/$LAB_PREFIX" dev eth0
  lab_offloads_off "$a" eth0
  lab_offloads_off "$b" eth0
  lab_offloads_off "$r" ra
  lab_offloads_off "$r" rb
  ip -n "$r" link set ra up
  ip -n "$r" link set rb up
  ip -n "$a" link set eth0 up
  ip -n "$b" link set eth0 up
}

# Kills every process still running inside the lab's namespaces (all of them were started by
# this lab), then deletes the namespaces, which deletes the veths in them. Idempotent.
lab_teardown() { # SUFFIX
  local s=$1 role ns pids
  for role in a r b; do
    ns=$(lab_ns "$role" "$s")
    [ -e "/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill $pids 2>/dev/null || true
  done
  sleep 0.2
  for role in a r b; do
    ns=$(lab_ns "$role" "$s")
    [ -e "/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}

# A kernel-side shaper for comparison runs: HTB at RATE with its default pfifo leaf (limit =
# txqueuelen, 1000 packets) on DEV in the router namespace, the "plain shaper" an operator
# would configure. `lab_kernel_qdisc SUFFIX DEV none` removes it.
lab_kernel_qdisc() { # SUFFIX DEV RATE|none
  local r
  r=$(lab_ns r "$1")
  ip netns exec "$r" tc qdisc del dev "$2" root 2>/dev/null || true
  [ "$3" = none ] && return 0
  ip netns exec "$r" tc qdisc add dev "$2" root handle 1: htb default 10
  ip netns exec "$r" tc class add dev "$2" parent 1: classid 1:10 htb rate "$3" quantum 1514
}

# A kernel bridge in the router namespace, for a reference run without cakewalk.
lab_kernel_bridge() { # SUFFIX
  local r
  r=$(lab_ns r "$1")
  ip -n "$r" link add br0 type bridge
  ip -n "$r" link set ra master br0
  ip -n "$r" link set rb master br0
  ip -n "$r" link set br0 up
}

# Waits until A can ping B (the forwarder in the middle is up), at most ~5 s.
lab_wait_path() { # SUFFIX
  local a i
  a=$(lab_ns a "$1")
  for i in $(seq 1 50); do
    ip netns exec "$a" ping -c 1 -W 0.1 -q "$LAB_IP_B" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# Summarises ping output on stdin as "N P50 P99 MAX" in milliseconds ("0 - - -" when empty).
lab_ping_summary() {
  sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' | sort -n | awk '
    { v[NR] = $1 }
    END {
      if (NR == 0) { print "0 - - -"; exit }
      p50 = v[int((NR - 1) * 0.50) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]
      printf "%d %.3f %.3f %.3f\n", NR, p50, p99, v[NR]
    }'
}

# Sleeps until OFFSET seconds after T0 (a $EPOCHREALTIME reading); at once if that has passed.
lab_sleep_until() { # T0 OFFSET
  sleep "$(awk -v t0="$1" -v off="$2" -v now="$EPOCHREALTIME" 'BEGIN { d = t0 + off - now; print (d > 0 ? d : 0) }')"
}

# One direction's TCP goodput over its ceiling after headers, from a scripts/lab/bidir run's
# output DIR: the ceiling is RATE_BPS times the payload share of a full frame (PAYLOAD of
# 1514 bytes: 1448 for IPv4 TCP with timestamps, 1428 for IPv6), times the share of the
# egress bytes that were data frames (the other direction's ACKs leave through the same port
# and take their part of the rate). That share compares rates (bytes over each window's own
# seconds): the ctl snapshots must lie inside iperf3's window (scripts/lab/bidir takes them by
# the clock), since an idle edge in their span would lower the egress rate and read as a
# link left unused. PHASE is p1 or p2, DIR_NAME download or
# upload. Prints the ratio, or 0 when a file is missing.
lab_goodput_ratio() { # DIR PHASE DIR_NAME RATE_BPS PAYLOAD
  local dir=$1 p=$2 rate=$4 payload=$5 client receiver port
  if [ "$3" = download ]; then
    client=$dir/$p-down.json receiver=$dir/$p-down.json port=0
  else
    client=$dir/$p-up.json receiver=$dir/$p-server-up.json port=1
  fi
  jq -n --slurpfile c "$client" --slurpfile r "$receiver" --slurpfile b "$dir/$p-before.json" --slurpfile a "$dir/$p-after.json" \
    --argjson port "$port" --argjson rate "$rate" --argjson payload "$payload" '
    ($r[0].end.sum_received.bytes // 0) as $bytes
    | ($r[0].end.sum_received.seconds // 0) as $secs
    | (($a[0].ports[$port].tx_bytes // 0) - ($b[0].ports[$port].tx_bytes // 0)) as $egress
    | (($a[0].elapsed_s // 0) - ($b[0].elapsed_s // 0)) as $span
    | (if $secs > 0 and $span > 0 then ($bytes * 1514 / $payload / $secs) / ($egress / $span)
       else 0 end) as $frac
    | (if $egress > 0 and $frac > 0 then [$frac, 1] | min else 1 end) as $share
    | ($c[0].end.sum_received.bits_per_second // 0) / ($rate * $payload / 1514 * $share)
    | . * 10000 | round / 10000' 2>/dev/null || echo 0
}
