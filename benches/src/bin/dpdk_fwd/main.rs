//! `dpdk_fwd`: single-core forwarding throughput on DPDK virtual devices, as ratios to a
//! bare rx->tx loop measured in the same process on the same port bindings (docs/design.md,
//! "Performance goals": G1, G2, G4, G5).
//!
//! Frames: 60-byte IPv4/UDP frames (64 bytes on the wire with the FCS) over `--flows` flows,
//! written to a pcap file and replayed forever by `net_pcap,rx_pcap=FILE,infinite_rx=1`;
//! transmitted to `net_null`, which frees them. One EAL, one core (`-l CORE`), burst 32.
//!
//! Rows, each `--reps` times interleaved (so drift hits every row alike), median reported:
//! * `bare`: rx_burst -> tx_burst, nothing else;
//! * `bare + parse`: the bare loop plus `wire::parse_into` of every frame, a burst at a time
//!   into the burst's meta array, as the engine parses when it needs every meta (CAKE,
//!   several TX queues);
//! * `fifo+bypass` / `fifo`: offer the burst to one `qdisc::mq::TxQueue`
//!   (`enqueue_burst`, as the engine does with one TX queue) over the FIFO baseline,
//!   with and without the enqueue bypass; frames are parsed only when the queue needs their
//!   meta (queued, or CAKE), so a burst that bypasses the idle FIFO is never parsed;
//! * `cake` / `cake+bypass`: the same with CAKE (diffserv3, triple-isolate), unlimited rate;
//! * `cake shaped`: CAKE shaped to 90 % of what shaped CAKE carried in calibration runs
//!   (bits of frame length), also reporting delivered/configured;
//! * `drr floor`: the `cake` row's path with `qdisc::testing::DrrFloor` (CAKE's DRR++ skeleton
//!   and nothing else) in place of CAKE: the best ratio any CAKE could reach on this path;
//! * `engine ...`: the forwarder's engine itself, one pinned worker, on fresh vdev pairs, with
//!   the queues `cakewalk run` builds (`app::build_queues`).
//!
//! Every row but `bare` is paired with a bare run just before it; its ratio is the median
//! of those pairs.
//!
//! Then the thread scaling table (pktgen's rows on real vdevs), for each count of
//! `--threads` (default 1 and 2, at most the cores): each thread is its own pinned lcore with
//! its own `net_pcap` -> `net_null` pair and pool, and feeds its own TX queue of one
//! `MultiQueue` (FIFO or unlimited CAKE, with and without bypass); Mpps is summed over the
//! threads and each row is paired with a bare run of the same thread count.
//!
//! The clock is the engine's (the TSC between monotonic-clock readings), read once per burst,
//! as in the engine. Needs root and hugepages
//! (`hugepage-setup reserve --pages 512`), or `--no-huge`.
//!
//! Run: `cargo run --release -p cakewalk-benches --features dpdk --bin dpdk_fwd -- --seconds 3`

#[cfg(not(feature = "dpdk"))]
fn main() -> std::process::ExitCode {
    eprintln!(
        "error: dpdk_fwd was built without DPDK; build with `--features dpdk` (needs libdpdk-dev)"
    );
    std::process::ExitCode::FAILURE
}

#[cfg(feature = "dpdk")]
fn main() -> std::process::ExitCode {
    match bench::run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "dpdk")]
mod bench;
#[cfg(feature = "dpdk")]
mod report;
#[cfg(feature = "dpdk")]
mod rows;
