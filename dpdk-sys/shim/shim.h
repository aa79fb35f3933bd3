/* cakewalk's C shim: out-of-line copies of the DPDK functions that exist only as static
 * inline (or macro) definitions in the headers, so Rust can call them. Burst granularity where
 * the hot path uses them; per-packet fields are read in Rust from the bindgen structs. Names
 * start with cw_ (never _rte_: leading underscores are reserved in C). */
#ifndef CW_SHIM_H
#define CW_SHIM_H

#include <stdint.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

/* RSS hash-function bits that DPDK defines as RTE_BIT64() expressions bindgen cannot evaluate. */
extern const uint64_t cw_eth_rss_ip;
extern const uint64_t cw_eth_rss_tcp;
extern const uint64_t cw_eth_rss_udp;

uint16_t cw_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                             uint16_t nb_pkts);
uint16_t cw_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                             uint16_t nb_pkts);
struct rte_mbuf *cw_rte_pktmbuf_alloc(struct rte_mempool *mp);
int cw_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count);
void cw_rte_pktmbuf_free(struct rte_mbuf *m);
void cw_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count);
void *cw_rte_pktmbuf_mtod(struct rte_mbuf *m);
char *cw_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
void cw_rte_prefetch0(const volatile void *p);
uint64_t cw_rte_rdtsc(void);
int cw_rte_errno(void);
unsigned int cw_rte_lcore_id(void);
/* Writes up to max CPU numbers of lcore_id's CPU set (rte_lcore_cpuset, a cpu_set_t that
 * bindgen does not carry) into cpus, lowest first; returns how many CPUs the set has. */
unsigned int cw_rte_lcore_cpus(unsigned int lcore_id, unsigned int *cpus, unsigned int max);

#endif /* CW_SHIM_H */
