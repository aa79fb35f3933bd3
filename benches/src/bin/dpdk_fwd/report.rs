//! The report: rewrites the dpdk section of BENCHMARKS.md from the measured rows, the goals
//! line and the thread-scaling and two-worker tables.

use anyhow::Context;

use crate::bench::{Args, Machine};
use crate::rows::BURST;

/// Rewrites the dpdk section of BENCHMARKS.md: the rows (`names`, median Mpps and
/// ratio to bare), the goals line, and the thread-scaling and two-worker tables when
/// they were measured.
pub(crate) fn write_section(
    args: &Args,
    machine: &Machine,
    (names, med, rat): (&[String], &[f64], &[f64]),
    goals: &str,
    scaling: Option<&cakewalk_benches::report::Table>,
    max_threads: usize,
    two_workers: Option<&cakewalk_benches::report::Table>,
) -> anyhow::Result<()> {
    let mut t = cakewalk_benches::report::Table::new(&[
        "row",
        "Mpps (median)",
        "ns/packet",
        "ratio to bare",
    ]);
    for i in 0..names.len() {
        t.push(vec![
            names[i].clone(),
            format!("{:.2}", med[i]),
            format!("{:.1}", 1e3 / med[i]),
            format!("{:.3}", rat[i]),
        ]);
    }
    let body = format!(
        "## DPDK forwarding, one core (`benches/src/bin/dpdk_fwd/`)\n\n\
         dpdk_fwd: {} ({}); load {}; {} s x {} reps per row, interleaved; {}-byte frames ({} on the wire), {} flows, burst {BURST}; \
         `net_pcap,infinite_rx=1` -> `net_null` on one pinned core\n\n\
         Command: `sudo hugepage-setup reserve --pages 512 && cargo run --release -p cakewalk-benches --features dpdk --bin dpdk_fwd -- --seconds {} --reps {} --write`\n\n{}\n\
         Inline rows do the engine's per-packet work in one loop (`TxQueue::enqueue_burst`, \
         then a tx burst); engine rows run the forwarder's engine (one busy-polling worker). \
         The shaped row asks for 90 % of what shaped CAKE carried in calibration runs; `drr \
         floor` is the `cake` row with CAKE's DRR++ skeleton alone (`qdisc::testing::DrrFloor`). \
         Ratio: the median over the reps of the row over a bare run made just before it. Goals \
         (docs/design.md): {goals}.{}",
        machine.line,
        cakewalk_benches::report::utc_now(),
        cakewalk_benches::report::load_average(),
        args.seconds,
        args.reps,
        args.frame,
        args.frame + 4,
        args.flows,
        args.seconds,
        args.reps,
        t.to_markdown(),
        match scaling {
            None => String::new(),
            Some(st) => format!(
                "\n\n### Thread scaling on DPDK vdevs\n\n\
                 Threads {:?}, each on its own lcore (cores {}) with its own `net_pcap` -> \
                 `net_null` pair and TX queue of one `qdisc::mq::MultiQueue` (CAKE unlimited). \
                 Mpps is summed over the threads; ratios are against a bare run of the same \
                 thread count.\n\n{}",
                machine.threads,
                machine.cores[..max_threads]
                    .iter()
                    .map(|c| c.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                st.to_markdown().trim_end()
            ),
        },
    );
    let body = if let Some(wt) = two_workers {
        format!(
            "{body}\n\n### The engine with two workers: TX queue choice\n\n\
             Two busy-polling workers, two RX and two TX queues, CAKE unlimited with the \
             bypass. `flow-hash` sends about half the frames to the other worker's queue (a full \
             intake drops); `worker` sends on the worker's own (Linux's XPS). Medians over {} \
             reps.\n\n{}",
            args.reps,
            wt.to_markdown().trim_end()
        )
    } else {
        body
    };
    let path = args.benchmarks.clone().unwrap_or_else(|| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md")
    });
    cakewalk_benches::report::update_section(&path, "dpdk", &body)
        .with_context(|| format!("updating {}", path.display()))?;
    println!("wrote the dpdk section of {}", path.display());
    Ok(())
}
