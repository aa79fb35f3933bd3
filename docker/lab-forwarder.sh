#!/bin/sh
# The forwarder container's command in the compose lab: cakewalk between the two lab networks
# (CW_IFACE_A/B, found by the entry point), shaped at CW_RATE with CW_QUEUE and any further
# flags in CW_ARGS (split on spaces: `--set shaper.upload.ack_filter=true`), writing its stats
# to /tmp/stats.jsonl. CW_PORT_KIND picks the backend:
#   afpacket  cakewalk's own AF_PACKET ports (default);
#   dpdk      DPDK's net_af_packet vdevs on the same interfaces (an image built with
#             `docker/build-image --dpdk` from a `--features dpdk` binary). Without hugepages in
#             the container the EAL runs with --no-huge; mount /dev/hugepages to use them.
# exec, so SIGINT from `docker stop` reaches cakewalk, which drains and prints its final stats.
set -eu
: "${CW_IFACE_A:?the entry point found no interface A (CW_IFACE_A_NET)}"
: "${CW_IFACE_B:?the entry point found no interface B (CW_IFACE_B_NET)}"
common="--queue ${CW_QUEUE:-cake} --rate ${CW_RATE:-100mbit} --idle sleep --duration 0 --stats-json /tmp/stats.jsonl ${CW_ARGS:-}"
case ${CW_PORT_KIND:-afpacket} in
  afpacket)
    # shellcheck disable=SC2086
    exec cakewalk run --port-kind afpacket --iface "$CW_IFACE_A,$CW_IFACE_B" $common ;;
  dpdk)
    if grep -q hugetlbfs /proc/mounts && [ "$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo)" -ge 128 ]; then
      mem='"--in-memory"'
    else
      mem='"--no-huge", "--no-shconf", "-m", "512"'
    fi
    eal="[\"-l\", \"0\", \"--no-pci\", $mem, \"--log-level=lib.eal:error\", \"--vdev=net_af_packet0,iface=$CW_IFACE_A\", \"--vdev=net_af_packet1,iface=$CW_IFACE_B\"]"
    # shellcheck disable=SC2086
    exec cakewalk run --port-kind dpdk --iface net_af_packet0,net_af_packet1 --set "ports.eal_args=$eal" $common ;;
  *)
    echo "lab-forwarder: CW_PORT_KIND '$CW_PORT_KIND' is not a backend; use afpacket or dpdk" >&2
    exit 2 ;;
esac
