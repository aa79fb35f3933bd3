/* Out-of-line wrappers for DPDK's static inline functions and macros; see shim.h. */
/* cpu_set_t, CPU_ISSET and rte_cpuset_t need the GNU extensions, before any header. */
#define _GNU_SOURCE
#include "shim.h"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_prefetch.h>

const uint64_t cw_eth_rss_ip = RTE_ETH_RSS_IP;
const uint64_t cw_eth_rss_tcp = RTE_ETH_RSS_TCP;
const uint64_t cw_eth_rss_udp = RTE_ETH_RSS_UDP;

uint16_t cw_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
                             uint16_t nb_pkts) {
  return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t cw_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
                             uint16_t nb_pkts) {
  return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *cw_rte_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int cw_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count) {
  return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void cw_rte_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

void cw_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count) {
  rte_pktmbuf_free_bulk(mbufs, count);
}

void *cw_rte_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }

char *cw_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }

void cw_rte_prefetch0(const volatile void *p) { rte_prefetch0(p); }

uint64_t cw_rte_rdtsc(void) { return rte_rdtsc(); }

int cw_rte_errno(void) { return rte_errno; }

unsigned int cw_rte_lcore_id(void) { return rte_lcore_id(); }

unsigned int cw_rte_lcore_cpus(unsigned int lcore_id, unsigned int *cpus, unsigned int max) {
  rte_cpuset_t set = rte_lcore_cpuset(lcore_id);
  unsigned int n = 0;
  for (unsigned int c = 0; c < CPU_SETSIZE; c++) {
    if (CPU_ISSET(c, &set)) {
      if (n < max)
        cpus[n] = c;
      n++;
    }
  }
  return n;
}
