//! The report: rewrites the dpdk section of BENCHMARKS.md from the measured rows, the goals
//! line and the thread-scaling and two-worker tables (a clause each there: G7's range and the
//! two `tx_select` rows; the tables are printed on stdout), rendered by
//! `cakewalk_benches::sections::dpdk`.

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
    two_workers: Option<&cakewalk_benches::report::Table>,
) -> anyhow::Result<()> {
    let rows: Vec<(String, f64, f64)> = names
        .iter()
        .zip(med)
        .zip(rat)
        .map(|((n, m), r)| (n.clone(), *m, *r))
        .collect();
    let command = format!(
        "sudo hugepage-setup reserve --pages 512 && cargo run --release -p cakewalk-benches \
         --features dpdk --bin dpdk_fwd -- --seconds {} --reps {} --write",
        args.seconds, args.reps
    );
    let head = format!(
        "{} {}-byte frames, {} flows, burst {BURST}, `net_pcap` -> `net_null`.",
        cakewalk_benches::report::provenance(
            &cakewalk_benches::report::utc_now(),
            &cakewalk_benches::report::commit(),
            &machine.line,
            &cakewalk_benches::report::load_average(),
            &command,
        ),
        args.frame + 4,
        args.flows,
    );
    let body = cakewalk_benches::sections::dpdk(&head, &rows, goals, scaling, two_workers);
    let path = args.benchmarks.clone().unwrap_or_else(|| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md")
    });
    cakewalk_benches::report::update_section(&path, "dpdk", &body)
        .with_context(|| format!("updating {}", path.display()))?;
    println!("wrote the dpdk section of {}", path.display());
    Ok(())
}
