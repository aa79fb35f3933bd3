//! Download and upload: the two directions a box between a LAN and an uplink shapes, each at
//! its own rate and with its own CAKE options.
//!
//! `[ports] uplink` names the port that faces the uplink (`"b"` by default). What leaves
//! through the uplink port is the **upload**; what leaves through the other port, towards the
//! LAN, is the **download**. `[shaper]` is the common default of both directions;
//! `[shaper.download]` and `[shaper.upload]` override any CAKE key for one direction, so an
//! operator who thinks "475 down, 45 up" writes exactly that. The same override can be
//! written per port as `[ports.a.shaper]` / `[ports.b.shaper]` (what leaves through that
//! port); one direction takes one of the two spellings. Command-line flags land on top.
//!
//! A few keys belong to the process, not to a direction, and are refused in a direction's
//! table with the reason: `seed` (one flow hash key, so every queue and `explain` agree),
//! `queue`, `bypass`, `sync_interval` and `sync_policy` (the multi-queue layer is built once,
//! the same for every port).

use qdisc::cake::CakeConfig;
use serde::Deserialize;

use super::keywords::CakeOptions;
use super::{ConfigError, Overrides, RawShaper, ShaperConfig};

pub use crate::direction::{egress_port, of_egress, Direction, PortSide};

/// The settings of one direction an operator checks first, in tc words: `rate 475Mbit
/// diffserv3 triple-isolate ingress no-ack-filter overhead 18 mpu 64`.
pub fn summary(c: &CakeConfig) -> String {
    use super::keywords;
    let rate = if c.rate.is_unlimited() {
        "unlimited".to_string()
    } else {
        format!("rate {}", super::units::format_rate(c.rate))
    };
    let overhead = if c.raw {
        "raw".to_string()
    } else {
        format!("overhead {} mpu {}", c.overhead, c.mpu)
    };
    format!(
        "{rate} {} {} {} {}{} {overhead}",
        keywords::diffserv_name(c.diffserv),
        keywords::flow_mode_name(c.flow_mode),
        if c.ingress { "ingress" } else { "egress" },
        match c.ack_filter {
            qdisc::cake::AckFilterMode::Off => "no-ack-filter",
            qdisc::cake::AckFilterMode::Filter => "ack-filter",
            qdisc::cake::AckFilterMode::Aggressive => "ack-filter-aggressive",
        },
        if c.autorate_ingress {
            " autorate-ingress"
        } else {
            ""
        },
    )
}

/// One direction's resolved shaper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectionShaper {
    /// Every CAKE option of this direction: `[shaper]`, then the direction's own keys.
    pub cake: CakeConfig,
    /// The CAKE options the direction's own table gave (empty when it has none).
    pub own: CakeOptions,
}

/// Both directions' shapers, indexed by [`Direction`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directions([DirectionShaper; 2]);

impl Directions {
    /// Both directions as the common `[shaper]` alone gives them.
    pub fn same_as(common: &ShaperConfig) -> Directions {
        let one = DirectionShaper {
            cake: common.cake.clone(),
            own: CakeOptions::default(),
        };
        Directions([one.clone(), one])
    }

    /// The shaper of `dir`.
    pub fn get(&self, dir: Direction) -> &DirectionShaper {
        &self.0[dir.index()]
    }

    /// The shaper of `dir`, writable.
    pub fn get_mut(&mut self, dir: Direction) -> &mut DirectionShaper {
        &mut self.0[dir.index()]
    }
}

/// Keys that belong to the process and cannot differ per direction, with the reason.
const PROCESS_KEYS: &[(&str, &str)] = &[
    ("seed", "one flow hash key serves the whole process, so every queue and `cakewalk explain` hash a flow alike"),
    ("queue", "both ports run the same queueing discipline"),
    ("bypass", "the enqueue bypass is one setting of the multi-queue layer"),
    ("sync_interval", "the rate sync of the multi-queue layer is one setting"),
    ("sync-interval", "the rate sync of the multi-queue layer is one setting"),
    ("sync_policy", "the rate sync of the multi-queue layer is one setting"),
    ("sync-policy", "the rate sync of the multi-queue layer is one setting"),
    ("download", "a direction's table holds CAKE keys, not another direction"),
    ("upload", "a direction's table holds CAKE keys, not another direction"),
];

/// Keys that say the same thing inside one table.
const SAME_KEY: &[(&str, &str)] = &[("rate", "bandwidth"), ("overhead", "raw")];

fn same_key(a: &str, b: &str) -> bool {
    let norm = |k: &str| k.replace('-', "_");
    let (a, b) = (norm(a), norm(b));
    a == b
        || SAME_KEY
            .iter()
            .any(|(x, y)| (*x == a && *y == b) || (*x == b && *y == a))
}

/// Where one direction's overrides were written.
pub struct DirectionTables {
    /// `[shaper.download]` / `[shaper.upload]`.
    pub named: Option<toml::Table>,
    /// `[ports.X.shaper]` of the port the direction leaves through.
    pub per_port: Option<toml::Table>,
}

/// Resolves both directions from the common `[shaper]` and each direction's tables.
///
/// # Errors
/// A [`ConfigError::Key`] naming the direction's key (`shaper.upload.rate`,
/// `ports.b.shaper.seed`) or the flag that set it.
pub fn resolve(
    common: &ShaperConfig,
    uplink: PortSide,
    mut tables: [DirectionTables; 2],
    overrides: &Overrides,
) -> Result<Directions, ConfigError> {
    let mut out = Directions::same_as(common);
    for dir in Direction::BOTH {
        let port = ["a", "b"][egress_port(uplink, dir)];
        let t = &mut tables[dir.index()];
        let named_label = format!("shaper.{}", dir.name());
        let port_label = format!("ports.{port}.shaper");
        let (table, label) = match (t.named.take(), t.per_port.take()) {
            (None, None) => continue,
            (Some(n), None) => (n, named_label),
            (None, Some(p)) => (p, port_label),
            (Some(named), Some(mut merged)) => {
                // One direction, two spellings: a key in both is a clash, unless a flag set
                // it (the command line wins over the file).
                for (k, v) in named {
                    let from_flag = overrides.origin_of(&format!("{named_label}.{k}")).is_some();
                    let clash: Vec<String> =
                        merged.keys().filter(|m| same_key(m, &k)).cloned().collect();
                    if !clash.is_empty() && !from_flag {
                        return Err(ConfigError::Key {
                            key: format!("{named_label}.{k}"),
                            message: format!(
                                "{port_label}.{} sets the {} too ({port_label} is what leaves through port {port}, the {}); keep one of the two",
                                clash[0],
                                dir.name(),
                                dir.name()
                            ),
                        });
                    }
                    for c in clash {
                        merged.remove(&c);
                    }
                    merged.insert(k, v);
                }
                (merged, port_label)
            }
        };
        if let Some((key, why)) = PROCESS_KEYS.iter().find(|(k, _)| table.contains_key(*k)) {
            return Err(ConfigError::Key {
                key: overrides.label(&format!("{label}.{key}"), &[]),
                message: format!(
                    "cannot differ per direction: {why}; set it in [shaper] for both directions"
                ),
            });
        }
        *out.get_mut(dir) = resolve_one(common, table, &label, overrides)?;
    }
    Ok(out)
}

fn resolve_one(
    common: &ShaperConfig,
    table: toml::Table,
    label: &str,
    overrides: &Overrides,
) -> Result<DirectionShaper, ConfigError> {
    let raw = RawShaper::deserialize(toml::Value::Table(table)).map_err(|e| ConfigError::Toml {
        origin: format!("in [{label}]"),
        message: e.to_string().trim_end().to_string(),
    })?;
    let (packet_limit, mtu) = (raw.packet_limit.is_some(), raw.mtu.is_some());
    let relabel = |e: ConfigError| match e {
        ConfigError::Key { key, message } => {
            let key = match key.strip_prefix("shaper") {
                Some(rest) => format!("{label}{rest}"),
                None => key,
            };
            ConfigError::Key {
                key: overrides.label(&key, &[]),
                message,
            }
        }
        other => other,
    };
    let own = raw.resolve().map_err(relabel)?;
    let mut cake = common.cake.clone();
    own.given.apply_to(&mut cake);
    if packet_limit {
        cake.packet_limit = own.cake.packet_limit;
    }
    if mtu {
        cake.mtu = own.cake.mtu;
    }
    cake.validate().map_err(|e| ConfigError::Key {
        key: label.to_string(),
        message: e.to_string(),
    })?;
    Ok(DirectionShaper {
        cake,
        own: own.given,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use qdisc::cake::AckFilterMode;

    fn err(text: &str) -> String {
        Config::from_toml_str(text).unwrap_err().to_string()
    }

    const CABLE: &str = "[shaper]\nrate = \"100mbit\"\ndiffserv = \"diffserv4\"\n\
        [shaper.download]\nrate = \"475mbit\"\ningress = true\n\
        [shaper.upload]\nrate = \"45mbit\"\nack_filter = true\n";

    #[test]
    fn each_direction_is_the_common_shaper_with_its_own_keys_on_top() {
        let c = Config::from_toml_str(CABLE).unwrap();
        let down = c.cake_for(Direction::Download);
        let up = c.cake_for(Direction::Upload);
        assert_eq!(down.rate.bits_per_sec(), 475_000_000);
        assert_eq!(up.rate.bits_per_sec(), 45_000_000);
        assert!(down.ingress && !up.ingress);
        assert_eq!(down.ack_filter, AckFilterMode::Off);
        assert_eq!(up.ack_filter, AckFilterMode::Filter);
        // The common key reaches both.
        assert_eq!(down.diffserv, qdisc::cake::DiffservMode::Diffserv4);
        assert_eq!(up.diffserv, qdisc::cake::DiffservMode::Diffserv4);
        // Port b is the uplink by default: the upload leaves through it.
        assert_eq!(c.egress_direction(1), Direction::Upload);
        assert_eq!(c.egress_direction(0), Direction::Download);
        assert_eq!(c.cake_for_egress(1).rate.bits_per_sec(), 45_000_000);
    }

    #[test]
    fn without_direction_tables_both_directions_are_the_common_shaper() {
        let c = Config::from_toml_str("[shaper]\nrate = \"20mbit\"").unwrap();
        for d in Direction::BOTH {
            assert_eq!(c.cake_for(d), c.to_cake_config());
        }
    }

    #[test]
    fn the_uplink_decides_which_port_carries_which_direction() {
        let text = format!("{CABLE}[ports]\nuplink = \"a\"\n");
        let c = Config::from_toml_str(&text).unwrap();
        assert_eq!(c.egress_direction(0), Direction::Upload);
        assert_eq!(c.cake_for_egress(0).rate.bits_per_sec(), 45_000_000);
        assert_eq!(c.cake_for_egress(1).rate.bits_per_sec(), 475_000_000);
        let e = err("[ports]\nuplink = \"c\"");
        assert!(e.contains("uplink") || e.contains("unknown variant"), "{e}");
    }

    #[test]
    fn a_per_port_table_is_the_direction_leaving_through_that_port() {
        let c = Config::from_toml_str(
            "[shaper]\nrate = \"100mbit\"\n[ports.a.shaper]\nrate = \"50mbit\"\n[ports.b.shaper]\nrate = \"10mbit\"\nack-filter = true",
        )
        .unwrap();
        assert_eq!(
            c.cake_for(Direction::Download).rate.bits_per_sec(),
            50_000_000
        );
        assert_eq!(
            c.cake_for(Direction::Upload).rate.bits_per_sec(),
            10_000_000
        );
        assert_eq!(
            c.cake_for(Direction::Upload).ack_filter,
            AckFilterMode::Filter
        );
        // One direction, both spellings, the same key: refused, naming both.
        let e = err("[shaper.upload]\nrate = \"1mbit\"\n[ports.b.shaper]\nbandwidth = \"2mbit\"");
        assert!(
            e.starts_with("shaper.upload.rate: ports.b.shaper.bandwidth sets the upload too"),
            "{e}"
        );
        // Different keys in the two spellings add up.
        let c = Config::from_toml_str(
            "[shaper.upload]\nrate = \"1mbit\"\n[ports.b.shaper]\nack_filter = true",
        )
        .unwrap();
        let up = c.cake_for(Direction::Upload);
        assert_eq!(
            (up.rate.bits_per_sec(), up.ack_filter),
            (1_000_000, AckFilterMode::Filter)
        );
    }

    #[test]
    fn a_key_that_cannot_differ_per_direction_is_refused_with_the_reason() {
        for key in [
            "seed = 1",
            "queue = \"fifo\"",
            "bypass = false",
            "sync_policy = \"equal\"",
        ] {
            let e = err(&format!("[shaper.upload]\n{key}"));
            let name = key.split(' ').next().unwrap();
            assert!(
                e.starts_with(&format!(
                    "shaper.upload.{name}: cannot differ per direction: "
                )) && e.contains("set it in [shaper]"),
                "{key}: {e}"
            );
        }
        let e = err("[ports.a.shaper]\nseed = 1");
        assert!(
            e.starts_with("ports.a.shaper.seed: cannot differ per direction"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_direction_value_names_the_direction_key() {
        let e = err("[shaper.download]\nrate = \"fast\"");
        assert!(
            e.starts_with("shaper.download.rate: 'fast' is not a rate"),
            "{e}"
        );
        let e = err("[shaper.upload]\nratee = 1");
        assert!(
            e.starts_with("in [shaper.upload]: unknown field `ratee`"),
            "{e}"
        );
        let e = err("[ports.b.shaper]\noverhead = 999");
        assert!(
            e.starts_with("ports.b.shaper.overhead: 999 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn command_line_flags_land_on_top_of_each_direction() {
        let mut o = Overrides::default();
        o.set("shaper.upload.rate", "30mbit", "--upload");
        let c = Config::from_toml_with(CABLE, "c", &o).unwrap();
        assert_eq!(
            c.cake_for(Direction::Upload).rate.bits_per_sec(),
            30_000_000
        );
        assert_eq!(
            c.cake_for(Direction::Download).rate.bits_per_sec(),
            475_000_000
        );
        // A flag wins over the per-port spelling of the same key too.
        let mut o = Overrides::default();
        o.set("shaper.upload.rate", "30mbit", "--upload");
        let c = Config::from_toml_with("[ports.b.shaper]\nbandwidth = \"9mbit\"", "c", &o).unwrap();
        assert_eq!(
            c.cake_for(Direction::Upload).rate.bits_per_sec(),
            30_000_000
        );
        // A common flag changes what a direction does not override.
        let mut o = Overrides::default();
        o.set("shaper.rate", "70mbit", "--rate");
        let c = Config::from_toml_with("[shaper.upload]\nrate = \"5mbit\"", "c", &o).unwrap();
        assert_eq!(
            c.cake_for(Direction::Download).rate.bits_per_sec(),
            70_000_000
        );
        assert_eq!(c.cake_for(Direction::Upload).rate.bits_per_sec(), 5_000_000);
        let mut bad = Overrides::default();
        bad.set("shaper.download.rate", "fast", "--download");
        let e = Config::from_toml_with("", "c", &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--download (shaper.download.rate): 'fast' is not a rate"),
            "{e}"
        );
    }

    #[test]
    fn autorate_on_several_queues_is_refused_per_direction() {
        let e = err("[shaper.download]\nautorate_ingress = true\n[engine]\ntx_queues = 2");
        assert!(
            e.starts_with("shaper.download.autorate_ingress: autorate-ingress needs one TX queue"),
            "{e}"
        );
    }

    #[test]
    fn the_effective_config_shows_each_direction_and_reads_back() {
        let c = Config::from_toml_str(CABLE).unwrap();
        let text = c.effective();
        assert!(text.contains("[shaper.download]\n"), "{text}");
        assert!(text.contains("[shaper.upload]\n"), "{text}");
        assert!(
            text.contains("what leaves through port a (a) towards the LAN"),
            "{text}"
        );
        let back = Config::from_toml_str(&text).unwrap();
        for d in Direction::BOTH {
            assert_eq!(back.cake_for(d), c.cake_for(d), "{text}");
        }
    }
}
