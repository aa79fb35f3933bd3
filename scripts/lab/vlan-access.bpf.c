// An 802.1Q access port for a lab host, as two tc programs for its veth (clsact): `egress`
// tags every frame the host sends with VLAN VID, `ingress` takes the tag off frames of VLAN
// VID and drops everything else. The lab's kernel has no VLAN devices (CONFIG_VLAN_8021Q is
// not set) and no VLAN-filtering bridge, but it has cls_bpf, and these two helpers are all a
// host on a VLAN needs. The kernel moves a received tag out of the frame before tc ingress
// runs, so `ingress` reads it from the skb, not from the bytes.
//
// Used by forwarder/tests/circuits_lab.rs, which builds it with
//   clang -O2 -target bpf -DVID=100 -c vlan-access.bpf.c -o vlan-access.o
// and attaches it with `tc filter add dev DEV {egress|ingress} bpf da obj vlan-access.o sec
// {egress|ingress}`. No kernel headers are needed: the few definitions are below.

typedef unsigned int u32;
typedef unsigned short u16;

// The head of the kernel's `struct __sk_buff` (include/uapi/linux/bpf.h), up to the VLAN
// fields; the verifier checks each access against the real layout.
struct __sk_buff {
	u32 len, pkt_type, mark, queue_mapping, protocol, vlan_present, vlan_tci, vlan_proto;
};

#define BPF_FUNC_skb_vlan_push 18
#define BPF_FUNC_skb_vlan_pop 19
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define SEC(name) __attribute__((section(name), used))

#ifndef VID
#define VID 100
#endif

static long (*skb_vlan_push)(struct __sk_buff *skb, u16 proto, u16 tci) =
	(void *)BPF_FUNC_skb_vlan_push;
static long (*skb_vlan_pop)(struct __sk_buff *skb) = (void *)BPF_FUNC_skb_vlan_pop;

SEC("egress") int tag(struct __sk_buff *skb)
{
	// TPID 0x8100 in network order.
	return skb_vlan_push(skb, __builtin_bswap16(0x8100), VID) ? TC_ACT_SHOT : TC_ACT_OK;
}

SEC("ingress") int untag(struct __sk_buff *skb)
{
	if (!skb->vlan_present || (skb->vlan_tci & 0x0fff) != VID)
		return TC_ACT_SHOT;
	return skb_vlan_pop(skb) ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
