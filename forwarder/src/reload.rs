//! SIGHUP reload: re-read the config file the forwarder started with (command-line overrides
//! still laid on top, so a flag keeps winning), apply what can change live through
//! [`crate::control::apply_reload`] (rate, diffserv, flow mode, overhead and every other CAKE
//! option: a parameter write per TX queue, nothing queued is dropped) and log by name every
//! changed key that only takes effect after a restart (ports, engine, stats, queue kind, rate
//! sync). A file that no longer parses is reported and the running configuration is kept.
//!
//! This module does not watch the file and never restarts anything by itself; `systemctl
//! reload cakewalk` sends the SIGHUP (deploy/systemd/cakewalk.service).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use qdisc::cake::CakeConfig;
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::{Handle, Signals};

use crate::config::units::{format_duration_ns, format_rate, format_size};
use crate::config::{Config, Overrides};

/// The outcome of one reload, for the log line and for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Live changes, as `key old -> new`.
    pub applied: Vec<String>,
    /// Keys that changed but need a restart.
    pub needs_restart: Vec<String>,
    /// Live keys whose value in the file differs from the running one because a
    /// command-line flag sets them, as `key (--flag keeps X; the file says Y)`.
    pub overridden: Vec<String>,
    /// Why the file was not used, when it was not.
    pub error: Option<String>,
    /// What reading the circuit files again did (`Err`: why they were refused and the
    /// circuits in force kept); `None` without circuits.
    pub circuits: Option<Result<String, String>>,
}

impl ReloadOutcome {
    /// The lines written to stderr (the journal under systemd).
    pub fn log_lines(&self, origin: &str) -> Vec<String> {
        if let Some(e) = &self.error {
            return vec![format!(
                "reload: {origin}: {e}; keeping the running configuration"
            )];
        }
        let mut v = Vec::new();
        if self.applied.is_empty() && !self.overridden.is_empty() {
            v.push(format!(
                "reload: {origin}: no live setting changed: the command line wins over the file for {}",
                self.overridden.join(", ")
            ));
        } else if self.applied.is_empty() {
            v.push(format!("reload: {origin}: no live setting changed"));
        } else {
            v.push(format!(
                "reload: {origin}: applied live: {}",
                self.applied.join(", ")
            ));
        }
        if !self.applied.is_empty() && !self.overridden.is_empty() {
            v.push(format!(
                "reload: {origin}: the command line wins over the file for {}",
                self.overridden.join(", ")
            ));
        }
        if !self.needs_restart.is_empty() {
            v.push(format!(
                "reload: {origin}: changed but needs a restart (systemctl restart cakewalk): {}",
                self.needs_restart.join(", ")
            ));
        }
        match &self.circuits {
            Some(Ok(said)) => v.push(format!("reload: {origin}: {said}")),
            Some(Err(e)) => v.push(format!(
                "reload: {origin}: circuit files refused, keeping the circuits in force: {e}"
            )),
            None => {}
        }
        v
    }
}

/// Returns the CAKE options that differ between `old` and `new`, as `key old -> new`, in
/// config-key spelling.
pub fn cake_changes(old: &CakeConfig, new: &CakeConfig) -> Vec<String> {
    let mut v = Vec::new();
    let mut diff = |key: &str, a: String, b: String| {
        if a != b {
            v.push(format!("{key} {a} -> {b}"));
        }
    };
    diff("rate", format_rate(old.rate), format_rate(new.rate));
    diff(
        "diffserv",
        format!("{:?}", old.diffserv).to_lowercase(),
        format!("{:?}", new.diffserv).to_lowercase(),
    );
    diff(
        "flow_mode",
        format!("{:?}", old.flow_mode).to_lowercase(),
        format!("{:?}", new.flow_mode).to_lowercase(),
    );
    let overhead = |c: &CakeConfig| {
        if c.raw {
            "raw".to_string()
        } else {
            c.overhead.to_string()
        }
    };
    diff("overhead", overhead(old), overhead(new));
    diff("mpu", old.mpu.to_string(), new.mpu.to_string());
    diff(
        "atm",
        format!("{:?}", old.atm).to_lowercase(),
        format!("{:?}", new.atm).to_lowercase(),
    );
    diff(
        "ack_filter",
        format!("{:?}", old.ack_filter).to_lowercase(),
        format!("{:?}", new.ack_filter).to_lowercase(),
    );
    diff("nat", old.nat.to_string(), new.nat.to_string());
    diff("wash", old.wash.to_string(), new.wash.to_string());
    diff("ingress", old.ingress.to_string(), new.ingress.to_string());
    diff(
        "autorate_ingress",
        old.autorate_ingress.to_string(),
        new.autorate_ingress.to_string(),
    );
    diff(
        "split_gso",
        old.split_gso.to_string(),
        new.split_gso.to_string(),
    );
    diff(
        "rtt",
        format_duration_ns(old.interval_ns),
        format_duration_ns(new.interval_ns),
    );
    diff(
        "target",
        format_duration_ns(old.target_ns),
        format_duration_ns(new.target_ns),
    );
    let memlimit = |c: &CakeConfig| c.memlimit.map_or("auto".to_string(), format_size);
    diff("memlimit", memlimit(old), memlimit(new));
    diff(
        "fwmark",
        format!("{:#x}", old.fwmark_mask),
        format!("{:#x}", new.fwmark_mask),
    );
    diff(
        "packet_limit",
        old.packet_limit.to_string(),
        new.packet_limit.to_string(),
    );
    diff("mtu", old.mtu.to_string(), new.mtu.to_string());
    diff("seed", old.seed.to_string(), new.seed.to_string());
    v
}

/// The CAKE options that differ between `old` and `new` in each direction: `rate 100mbit ->
/// 50mbit` when both directions changed alike, else `upload rate 10mbit -> 5mbit`.
pub fn direction_changes(old: &Config, new: &Config) -> Vec<String> {
    use crate::config::direction::Direction;
    let per: Vec<(Direction, Vec<String>)> = Direction::BOTH
        .iter()
        .map(|&d| {
            (
                d,
                cake_changes(&old.directions.get(d).cake, &new.directions.get(d).cake),
            )
        })
        .collect();
    if per[0].1 == per[1].1 {
        return per[0].1.clone();
    }
    per.into_iter()
        .flat_map(|(d, changes)| {
            changes
                .into_iter()
                .map(move |c| format!("{} {c}", d.name()))
        })
        .collect()
}

/// Returns the changed keys outside CAKE that only a restart applies, by name
/// (`ports.b.iface`, `shaper.sync_policy`, `engine`).
pub fn restart_keys(old: &Config, new: &Config) -> Vec<String> {
    let mut v = Vec::new();
    for (name, a, b) in [
        ("a", &old.ports.a, &new.ports.a),
        ("b", &old.ports.b, &new.ports.b),
    ] {
        if a.name != b.name {
            v.push(format!("ports.{name}.name"));
        }
        if a.kind != b.kind {
            v.push(format!("ports.{name}.kind"));
        }
        if a.iface != b.iface {
            v.push(format!("ports.{name}.iface"));
        }
        if a.input != b.input {
            v.push(format!("ports.{name}.input"));
        }
        if a.output != b.output {
            v.push(format!("ports.{name}.output"));
        }
        if a.rx_queues != b.rx_queues {
            v.push(format!("ports.{name}.rx_queues"));
        }
    }
    let (p, q) = (&old.ports, &new.ports);
    if p.uplink != q.uplink {
        v.push("ports.uplink".into());
    }
    if p.bidirectional != q.bidirectional {
        v.push("ports.bidirectional".into());
    }
    if p.loop_input != q.loop_input {
        v.push("ports.loop".into());
    }
    if p.pool_buffers != q.pool_buffers {
        v.push("ports.pool_buffers".into());
    }
    if p.buffer_size != q.buffer_size {
        v.push("ports.buffer_size".into());
    }
    if p.synth != q.synth {
        v.extend(changed_keys("ports.synth", &p.synth, &q.synth));
    }
    if p.eal_args != q.eal_args {
        v.push("ports.eal_args".into());
    }
    if old.shaper.queue != new.shaper.queue {
        v.push("shaper.queue".into());
    }
    if old.circuits.is_some() != new.circuits.is_some() {
        v.push("circuits.files (circuits on or off)".into());
    }
    if old.shaper.bypass != new.shaper.bypass {
        v.push("shaper.bypass".into());
    }
    if old.shaper.sync_policy != new.shaper.sync_policy {
        v.push("shaper.sync_policy".into());
    }
    if old.shaper.sync_interval_ns != new.shaper.sync_interval_ns {
        v.push("shaper.sync_interval".into());
    }
    if old.engine != new.engine {
        v.extend(changed_keys("engine", &old.engine, &new.engine));
    }
    if old.stats != new.stats {
        let resolved = |t: &toml::Table| -> crate::stats::StatsConfig {
            toml::Value::Table(t.clone()).try_into().unwrap_or_default()
        };
        v.extend(changed_keys(
            "stats",
            &resolved(&old.stats),
            &resolved(&new.stats),
        ));
    }
    v
}

/// The keys of `prefix` whose values differ between `old` and `new` (`engine.workers`), or
/// `prefix` alone when the two cannot be compared key by key.
fn changed_keys<T: serde::Serialize>(prefix: &str, old: &T, new: &T) -> Vec<String> {
    let table = |t: &T| match toml::Value::try_from(t) {
        Ok(toml::Value::Table(t)) => Some(t),
        _ => None,
    };
    let (Some(a), Some(b)) = (table(old), table(new)) else {
        return vec![prefix.to_string()];
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{prefix}.{k}"))
        .collect()
}

/// The live CAKE settings a command-line flag keeps from what the file says, as
/// `rate (--rate keeps 10mbit; the file says 90mbit)`.
fn overridden_by_flags(
    running: &Config,
    file_alone: &Config,
    overrides: &Overrides,
) -> Vec<String> {
    use crate::config::direction::Direction;
    let mut out = Vec::new();
    for d in Direction::BOTH {
        let changes = cake_changes(
            &running.directions.get(d).cake,
            &file_alone.directions.get(d).cake,
        );
        for change in changes {
            let Some((key, values)) = change.split_once(' ') else {
                continue;
            };
            let Some((kept, file)) = values.split_once(" -> ") else {
                continue;
            };
            // rtt sets target too; bandwidth is rate. A flag for the direction or for both.
            let names: Vec<&str> = match key {
                "rate" => vec!["rate", "bandwidth"],
                "target" => vec!["target", "rtt"],
                "overhead" => vec!["overhead", "raw"],
                other => vec![other],
            };
            let keys: Vec<String> = names
                .iter()
                .flat_map(|n| [format!("shaper.{n}"), format!("shaper.{}.{n}", d.name())])
                .chain([
                    "shaper.options".to_string(),
                    format!("shaper.{}.options", d.name()),
                ])
                .collect();
            let Some(flag) = overrides
                .entries
                .iter()
                .rev()
                .find(|o| keys.contains(&o.key))
                .map(|o| o.flag.clone())
            else {
                continue;
            };
            let line = format!("{key} ({flag} keeps {kept}; the file says {file})");
            out.push((d, line));
        }
    }
    // Said once when both directions keep the same, else per direction.
    let (down, up): (Vec<_>, Vec<_>) = out.iter().partition(|(d, _)| *d == Direction::Download);
    let same = down.len() == up.len() && down.iter().zip(&up).all(|(a, b)| a.1 == b.1);
    if same {
        return down.into_iter().map(|(_, l)| l.clone()).collect();
    }
    out.into_iter()
        .map(|(d, l)| format!("{} {l}", d.name()))
        .collect()
}

/// Re-reads `path` with `overrides` and applies it over `current` (the last applied config,
/// updated in place when the file loads). `started` is what the process started with: keys
/// that need a restart are listed against it, so they keep being reported until one happens.
pub fn reload_once(
    path: &std::path::Path,
    overrides: &Overrides,
    current: &mut Config,
    started: &Config,
) -> ReloadOutcome {
    let new = match Config::load(Some(path), overrides) {
        Ok(c) => c,
        Err(e) => {
            return ReloadOutcome {
                error: Some(e.to_string()),
                ..ReloadOutcome::default()
            }
        }
    };
    if let Err(e) = new.shaper.cake.validate() {
        return ReloadOutcome {
            error: Some(e.to_string()),
            ..ReloadOutcome::default()
        };
    }
    let applied = direction_changes(current, &new);
    let overridden = if overrides.is_empty() {
        Vec::new()
    } else {
        // The file alone may not load (a flag may supply what it lacks): then there is
        // nothing to compare.
        Config::load(Some(path), &Overrides::default())
            .map(|file_alone| overridden_by_flags(&new, &file_alone, overrides))
            .unwrap_or_default()
    };
    let mut needs_restart = restart_keys(started, &new);
    // The control path names what it refused; keep its coarse names only when ours do not
    // already cover them ("ports" vs "ports.b.iface").
    for k in crate::control::apply_reload(&new) {
        let covered = needs_restart
            .iter()
            .any(|n| n == &k || n.starts_with(&format!("{k}.")));
        if !covered {
            needs_restart.push(k);
        }
    }
    let circuits = crate::control::reload_circuits(&new);
    *current = new;
    ReloadOutcome {
        applied,
        needs_restart,
        overridden,
        error: None,
        circuits,
    }
}

/// A running SIGHUP listener; dropping it stops the listener thread.
pub struct Reloader {
    handle: Handle,
    thread: Option<JoinHandle<()>>,
    last: Arc<Mutex<Option<ReloadOutcome>>>,
}

impl Reloader {
    /// Starts listening for SIGHUP. With a `path`, each SIGHUP re-reads it (with `overrides`)
    /// against `started`; without one, SIGHUP is logged and ignored (it no longer kills the
    /// process).
    ///
    /// # Errors
    /// The signal handler cannot be installed.
    pub fn spawn(
        path: Option<PathBuf>,
        overrides: Overrides,
        started: Config,
    ) -> std::io::Result<Reloader> {
        let mut signals = Signals::new([SIGHUP])?;
        let handle = signals.handle();
        let last = Arc::new(Mutex::new(None));
        let last_t = last.clone();
        let thread = std::thread::Builder::new()
            .name("cakewalk-reload".into())
            .spawn(move || {
                let mut current = started.clone();
                for _ in signals.forever() {
                    let Some(p) = &path else {
                        crate::log_line!(
                            "reload: started without --config, nothing to re-read; SIGHUP ignored"
                        );
                        continue;
                    };
                    let out = reload_once(p, &overrides, &mut current, &started);
                    for line in out.log_lines(&p.display().to_string()) {
                        crate::log_line!("{line}");
                    }
                    *last_t.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
                }
            })?;
        Ok(Reloader {
            handle,
            thread: Some(thread),
            last,
        })
    }

    /// Returns the outcome of the latest reload, if any happened.
    pub fn last(&self) -> Option<ReloadOutcome> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        Config::from_toml_str(text).unwrap()
    }

    #[test]
    fn changed_cake_options_are_named_with_old_and_new_values() {
        let a = cfg("[shaper]\nrate = \"20mbit\"\ndiffserv = \"diffserv3\"");
        let b = cfg("[shaper]\nrate = \"60mbit\"\ndiffserv = \"besteffort\"\noverhead = 18");
        let c = cake_changes(&a.shaper.cake, &b.shaper.cake);
        assert!(
            c.iter().any(|l| l.starts_with("rate ") && l.contains("->")),
            "{c:?}"
        );
        assert!(
            c.contains(&"diffserv diffserv3 -> besteffort".to_string()),
            "{c:?}"
        );
        assert!(c.contains(&"overhead raw -> 18".to_string()), "{c:?}");
        assert_eq!(c.len(), 3, "{c:?}");
    }

    #[test]
    fn a_change_to_one_direction_is_named_with_its_direction() {
        let a = cfg("[shaper]\nrate = \"50mbit\"\n[shaper.upload]\nrate = \"10mbit\"");
        let b = cfg("[shaper]\nrate = \"50mbit\"\n[shaper.upload]\nrate = \"5mbit\"");
        assert_eq!(
            direction_changes(&a, &b),
            vec!["upload rate 10mbit -> 5mbit".to_string()]
        );
        let c = cfg("[shaper]\nrate = \"40mbit\"\n[shaper.upload]\nrate = \"10mbit\"");
        assert_eq!(
            direction_changes(&a, &c),
            vec!["download rate 50mbit -> 40mbit".to_string()]
        );
        let d = cfg("[shaper]\nrate = \"50mbit\"\n[shaper.upload]\nrate = \"10mbit\"\n[ports]\nuplink = \"a\"");
        assert_eq!(restart_keys(&a, &d), vec!["ports.uplink".to_string()]);
    }

    #[test]
    fn identical_configs_have_no_changes() {
        let a = cfg("[shaper]\nrate = \"20mbit\"");
        assert!(cake_changes(&a.shaper.cake, &a.shaper.cake.clone()).is_empty());
        assert!(restart_keys(&a, &a.clone()).is_empty());
    }

    #[test]
    fn port_and_sync_changes_need_a_restart_and_are_named_by_key() {
        let a = cfg(
            "[ports.b]\nkind = \"afpacket\"\niface = \"eth1\"\n[shaper]\nsync_policy = \"equal\"",
        );
        let b = cfg("[ports.b]\nkind = \"afpacket\"\niface = \"eth2\"\n[shaper]\nsync_policy = \"work-conserving\"");
        assert_eq!(
            restart_keys(&a, &b),
            vec![
                "ports.b.iface".to_string(),
                "shaper.sync_policy".to_string()
            ]
        );
    }

    #[test]
    fn a_changed_eal_argument_needs_a_restart_and_is_named() {
        // Found by the config_reload fuzz target: the EAL arguments were the one port
        // setting a reload changed without naming it.
        let dpdk = |eal: &str| {
            cfg(&format!(
                "[ports]\neal_args = [{eal}]\n[ports.a]\nkind = \"dpdk\"\niface = \"0000:01:00.0\"\n\
                 [ports.b]\nkind = \"dpdk\"\niface = \"0000:01:00.1\"\n"
            ))
        };
        assert_eq!(
            restart_keys(&dpdk("\"-l\", \"1-2\""), &dpdk("\"-l\", \"1-3\"")),
            vec!["ports.eal_args".to_string()]
        );
    }

    #[test]
    fn a_broken_file_keeps_the_running_config_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[shaper]\nrate = \"fast\"\n").unwrap();
        let started = cfg("[shaper]\nrate = \"20mbit\"");
        let mut current = started.clone();
        let out = reload_once(&p, &Overrides::default(), &mut current, &started);
        let err = out.error.clone().unwrap();
        assert!(err.contains("shaper.rate"), "{err}");
        assert_eq!(current, started);
        let lines = out.log_lines("c.toml");
        assert!(
            lines[0].contains("keeping the running configuration"),
            "{lines:?}"
        );
    }

    #[test]
    fn command_line_overrides_still_win_after_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            "[shaper]\nrate = \"30mbit\"\ndiffserv = \"diffserv4\"\n",
        )
        .unwrap();
        let mut o = Overrides::default();
        o.set("shaper.rate", "10mbit", "--rate");
        let started = Config::load(Some(&p), &o).unwrap();
        let mut current = started.clone();
        std::fs::write(
            &p,
            "[shaper]\nrate = \"90mbit\"\ndiffserv = \"besteffort\"\n",
        )
        .unwrap();
        let out = reload_once(&p, &o, &mut current, &started);
        assert_eq!(
            out.applied,
            vec!["diffserv diffserv4 -> besteffort".to_string()]
        );
        assert_eq!(current.shaper.cake.rate.bits_per_sec(), 10_000_000);
        assert_eq!(
            out.overridden,
            vec!["rate (--rate keeps 10mbit; the file says 90mbit)".to_string()]
        );
    }

    #[test]
    fn a_reload_whose_only_change_a_flag_overrides_says_which_flag_wins() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "[shaper]\nrate = \"30mbit\"\n").unwrap();
        let mut o = Overrides::default();
        o.set("shaper.rate", "10mbit", "--rate");
        let started = Config::load(Some(&p), &o).unwrap();
        let mut current = started.clone();
        std::fs::write(&p, "[shaper]\nrate = \"90mbit\"\n").unwrap();
        let out = reload_once(&p, &o, &mut current, &started);
        assert!(out.applied.is_empty());
        assert_eq!(
            out.log_lines("c.toml"),
            vec!["reload: c.toml: no live setting changed: the command line wins over the file for rate (--rate keeps 10mbit; the file says 90mbit)".to_string()]
        );
    }

    #[test]
    fn a_restart_only_change_names_the_key_not_only_its_section() {
        let a = cfg("[engine]\nworkers = 1\n[stats]\ninterval = \"1s\"\n[ports.synth]\nflows = 4");
        let b = cfg("[engine]\nworkers = 2\nburst = 64\n[stats]\ninterval = \"5s\"\n[ports.synth]\nflows = 8");
        assert_eq!(
            restart_keys(&a, &b),
            vec![
                "ports.synth.flows".to_string(),
                "engine.burst".to_string(),
                "engine.workers".to_string(),
                "stats.interval".to_string(),
            ]
        );
    }
}
