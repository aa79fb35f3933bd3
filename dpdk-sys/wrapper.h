/* The DPDK headers bindgen reads, plus the cw_* shim declarations. The pkg-config cflags
 * already force-include rte_config.h. */
#include <rte_common.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_cycles.h>
#include <rte_version.h>

#include "shim/shim.h"
