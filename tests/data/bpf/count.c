/* A stand-in for an eBPF dataplane's tc program (tests/integration/test_bandwidth_layouts.py):
 * counts every packet it sees in an array map and returns TC_ACT_OK, which ends classification
 * on its hook, as Cilium's and the AWS network policy agent's programs do. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} packets SEC(".maps");

SEC("tc")
int count(struct __sk_buff *skb)
{
	__u32 key = 0;
	__u64 *value = bpf_map_lookup_elem(&packets, &key);

	if (value)
		__sync_fetch_and_add(value, 1);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
