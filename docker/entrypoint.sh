#!/usr/bin/env bash
# Entry point of the cakewalk image. Before running the command it:
#  1. reports the capabilities the lab needs and lacks (NET_ADMIN, NET_RAW from CapEff in
#     /proc/self/status) and whether hugepages are there (only DPDK needs them);
#  2. waits (up to 30 s) for the interfaces in CW_WAIT_IFACES ("eth1 eth2"), which
#     containerlab attaches after the container has started;
#  3. adds lab addresses (CW_ADDR="fd00:cafe::1/64"), so two containers on different Docker
#     networks can share one subnet bridged by the forwarder;
#  4. turns checksum and segmentation offloads off on the interfaces named in CW_OFFLOADS_OFF
#     ("eth0 eth1", or "all"), so frames crossing an AF_PACKET forwarder carry real checksums
#     and are never GSO/GRO super-frames;
#  5. resolves CW_IFACE_A_NET / CW_IFACE_B_NET (an IPv4 prefix like "198.19.10.") to the
#     interface that has an address in it and exports CW_IFACE_A / CW_IFACE_B, because Docker
#     does not promise which network becomes eth0.
# Then it execs the command; "$CW_IFACE_A"-style references in it are expanded by `sh -c` when
# the command is a single string.
set -euo pipefail

log() { echo "entrypoint: $*" >&2; }

cap_eff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
has_cap() { (( (16#${cap_eff:-0} >> $1) & 1 )); }
missing=()
has_cap 12 || missing+=("NET_ADMIN (--cap-add NET_ADMIN: addresses, offloads, qdiscs)")
has_cap 13 || missing+=("NET_RAW (--cap-add NET_RAW: AF_PACKET sockets, ping)")
for m in ${missing[@]+"${missing[@]}"}; do log "missing capability $m"; done
hp=$(awk '/^HugePages_Total:/ { print $2 }' /proc/meminfo 2>/dev/null || echo 0)
if [ "${hp:-0}" = 0 ] || ! grep -q hugetlbfs /proc/mounts; then
  log "no hugepages mounted (only DPDK ports need them: run hugepage-setup on the host and mount /dev/hugepages)"
fi

for dev in ${CW_WAIT_IFACES:-}; do
  for _ in $(seq 1 300); do [ -e "/sys/class/net/$dev" ] && break; sleep 0.1; done
  [ -e "/sys/class/net/$dev" ] || { log "interface $dev did not appear within 30 s"; exit 1; }
  ip link set "$dev" up 2>/dev/null || true
done

if [ -n "${CW_ADDR:-}" ]; then
  dev=${CW_ADDR_DEV:-eth0}
  # nodad: the address is usable at once, with no duplicate-address-detection wait (IPv6).
  case $CW_ADDR in *:*) flags=nodad ;; *) flags= ;; esac
  # shellcheck disable=SC2086
  ip addr add "$CW_ADDR" dev "$dev" $flags || log "could not add $CW_ADDR to $dev (needs NET_ADMIN, and IPv6 enabled for an IPv6 address)"
fi

if [ -n "${CW_OFFLOADS_OFF:-}" ]; then
  devs=$CW_OFFLOADS_OFF
  [ "$devs" = all ] && devs=$(ls /sys/class/net | grep -v '^lo$')
  for d in $devs; do
    ethtool -K "$d" tx off rx off tso off gso off gro off >/dev/null 2>&1 ||
      ethtool -K "$d" tx off tso off gso off gro off >/dev/null 2>&1 ||
      log "could not turn offloads off on $d (needs NET_ADMIN)"
  done
fi

iface_in() { # PREFIX -> the interface with an IPv4 address starting with PREFIX
  ip -o -4 addr show | awk -v p="$1" 'index($4, p) == 1 { print $2; exit }'
}
if [ -n "${CW_IFACE_A_NET:-}" ]; then
  CW_IFACE_A=$(iface_in "$CW_IFACE_A_NET"); export CW_IFACE_A
  [ -n "$CW_IFACE_A" ] || { log "no interface has an address in $CW_IFACE_A_NET"; exit 1; }
fi
if [ -n "${CW_IFACE_B_NET:-}" ]; then
  CW_IFACE_B=$(iface_in "$CW_IFACE_B_NET"); export CW_IFACE_B
  [ -n "$CW_IFACE_B" ] || { log "no interface has an address in $CW_IFACE_B_NET"; exit 1; }
fi

if [ $# -eq 0 ]; then set -- cakewalk --help; fi
if [ $# -eq 1 ]; then exec sh -c "$1"; fi
exec "$@"
