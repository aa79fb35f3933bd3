//! Placeholder for the forwarder's top level (helper D replaces this file): builds ports,
//! shapers and workers from a [`Config`] and runs them until the duration ends or a signal
//! arrives.

use crate::config::Config;

/// Runs the forwarder with `config`.
///
/// # Errors
/// Always, until the real implementation lands.
pub fn run(config: Config) -> anyhow::Result<()> {
    let _ = config;
    anyhow::bail!("the forwarding engine is not wired up yet (app::run is a stub)")
}
