//! `cakewalk from-tc`: turns a tc cake command or option string into the equivalent
//! `[shaper]` TOML section. Accepts the bare options (`"bandwidth 100mbit besteffort"`) or a
//! whole command (`"tc qdisc add dev eth0 root cake bandwidth 100mbit"`, also `replace`,
//! `change`, `handle 1:`, `parent 1:1`), and prints only what the string sets, plus comments
//! on where the command's `dev` goes and what a `parent` loses. Commands for any other qdisc
//! (`fq_codel`, `ingress`, `htb`) are refused: there is no cake in them to convert.

use std::fmt::Write as _;

use qdisc::cake::{AckFilterMode, AtmMode};

use super::direction::Direction;
use super::keywords::{self, CakeOptions, TcError};
use super::units;

/// What a `tc qdisc ...` line says around the cake options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcCommand<'a> {
    /// The device (`dev eth0`): the one whose egress tc shaped.
    pub dev: Option<&'a str>,
    /// The parent (`parent 1:1`): cake was a leaf under another qdisc.
    pub parent: Option<&'a str>,
    /// The option words after `cake` (or all of them, for a bare option string).
    pub options: Vec<&'a str>,
}

/// Reads a `tc qdisc add|replace|change dev X [root|parent P] [handle H] cake OPTIONS` line,
/// or bare cake options when the string does not start like tc.
///
/// # Errors
/// [`TcError::NotCake`] when the command names another qdisc (`... root fq_codel`,
/// `... ingress`), [`TcError::NoQdisc`] when it names none, [`TcError::Unknown`] for a word
/// that is not part of a tc qdisc command.
pub fn parse_command(input: &str) -> Result<TcCommand<'_>, TcError> {
    let words: Vec<&str> = input.split_whitespace().collect();
    let starts_like_tc = matches!(words.first(), Some(&"tc") | Some(&"qdisc"));
    if !starts_like_tc {
        return Ok(TcCommand {
            options: words,
            ..TcCommand::default()
        });
    }
    let mut cmd = TcCommand::default();
    // True where tc expects the qdisc kind: after `root`, or after a parent or handle.
    let mut kind_here = false;
    let mut i = 0;
    while i < words.len() {
        let value = words.get(i + 1).copied();
        match words[i] {
            "tc" | "qdisc" | "add" | "replace" | "change" => i += 1,
            "root" => {
                kind_here = true;
                i += 1;
            }
            "dev" => {
                cmd.dev = value;
                i += 2;
            }
            "parent" => {
                cmd.parent = value;
                kind_here = true;
                i += 2;
            }
            "handle" => {
                kind_here = true;
                i += 2;
            }
            "estimator" | "stab" => i += 2,
            "cake" | "cake_mq" => {
                cmd.options = words[i + 1..].to_vec();
                return Ok(cmd);
            }
            // The ingress and clsact qdiscs take no parent: their name is the kind itself.
            kind @ ("ingress" | "clsact") => {
                return Err(TcError::NotCake {
                    qdisc: kind.to_string(),
                })
            }
            kind if kind_here => {
                return Err(TcError::NotCake {
                    qdisc: kind.to_string(),
                })
            }
            other => {
                return Err(TcError::Unknown {
                    word: other.to_string(),
                    suggestion: ", expected a 'tc qdisc add dev DEV root cake ...' command"
                        .to_string(),
                })
            }
        }
    }
    Err(TcError::NoQdisc {
        command: input.trim().to_string(),
    })
}

/// The option words of a tc cake command or option string ([`parse_command`]).
///
/// # Errors
/// As [`parse_command`].
pub fn option_words(input: &str) -> Result<Vec<&str>, TcError> {
    parse_command(input).map(|c| c.options)
}

/// A converted tc line: the `[shaper]` section and what the conversion could not carry over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    /// The `[shaper]` section, with comments that say where `dev` goes.
    pub toml: String,
    /// What is lost in the conversion (a parent qdisc's hierarchy), for standard error.
    pub warnings: Vec<String>,
}

/// Converts a tc cake command or option string to a `[shaper]` TOML section.
///
/// # Errors
/// A [`TcError`] naming the first word tc would refuse.
///
/// # Examples
/// ```
/// let toml = forwarder::config::tc::to_toml("tc qdisc add dev eth0 root cake bandwidth 1000").unwrap();
/// assert!(toml.contains("bandwidth = \"1kbit\""));
/// ```
pub fn to_toml(input: &str) -> Result<String, TcError> {
    convert(input).map(|c| c.toml)
}

/// [`to_toml`], with the warnings about what the tc line meant that cakewalk cannot do.
///
/// # Errors
/// As [`to_toml`].
pub fn convert(input: &str) -> Result<Conversion, TcError> {
    let cmd = parse_command(input)?;
    let words = &cmd.options;
    let mut options = CakeOptions::default();
    options.apply_words(words)?;
    // "cake_mq" can only be the qdisc kind here: as an option word it would have failed.
    let is_cake_mq = input.split_whitespace().any(|w| w == "cake_mq");
    if is_cake_mq && options.autorate_ingress == Some(true) {
        // tc-testing cake_mq 5f62: the kernel rejects autorate-ingress on cake_mq. The
        // reason is the one every other path gives (config::autorate_conflict).
        return Err(TcError::Unsupported {
            option: "autorate-ingress",
            qdisc: "cake_mq",
            fix: format!(
                "{}; use 'cake' (one TX queue) or give a fixed 'bandwidth' instead",
                super::AUTORATE_NEEDS_ONE_QUEUE
            ),
        });
    }
    let mut toml = String::new();
    if let Some(dev) = cmd.dev {
        // cakewalk shapes what it transmits on a port; tc's root cake on `dev` shaped what
        // left `dev`. Forwarding A -> B, the uplink's egress is port B's. The name goes into
        // a TOML comment, where a control character would make the whole output unreadable
        // as TOML: it is written escaped (quotes too, as the suggested iface = "..." needs).
        let dev = dev.escape_debug();
        let _ = writeln!(
            toml,
            "# dev {dev}: tc shaped what leaves {dev}; in cakewalk that is the egress of the port whose\n\
             # interface is {dev}. When {dev} is the uplink, make it port b (what arrives on port a\n\
             # leaves on port b): [ports.b] kind = \"afpacket\", iface = \"{dev}\"."
        );
    }
    let mut warnings = Vec::new();
    if let Some(parent) = cmd.parent {
        let lost = format!(
            "'parent {parent}' makes this cake a leaf under another qdisc (an HTB class, say); cakewalk runs cake at the top of the port, so that hierarchy is lost (the parent's rate limit, its classes and filters): set bandwidth to the rate the parent class allowed"
        );
        let _ = writeln!(toml, "# warning: {lost}");
        warnings.push(lost);
    }
    toml.push_str(&render(&options, &words.join(" ")));
    Ok(Conversion { toml, warnings })
}

/// Splits pasted tc input into one command per line: at newlines, `;`, and before every
/// `tc qdisc` after the first (so several commands given as one argument still split).
pub fn split_commands(input: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in input.split(['\n', ';']) {
        let words: Vec<&str> = part.split_whitespace().collect();
        let mut cur: Vec<&str> = Vec::new();
        for (i, w) in words.iter().enumerate() {
            if *w == "tc" && words.get(i + 1) == Some(&"qdisc") && !cur.is_empty() {
                out.push(cur.join(" "));
                cur.clear();
            }
            cur.push(w);
        }
        if !cur.is_empty() {
            out.push(cur.join(" "));
        }
    }
    out
}

/// Which direction a tc line's `dev` shaped: the port that carries the interface, by its
/// egress (`ports`, when known); an `ifb` device is the download (the uplink's ingress
/// redirected to an IFB, as OpenWrt's SQM sets it up); without `ports`, any other device is
/// taken as the uplink, whose egress is the upload.
fn direction_of_dev(
    dev: &str,
    ports: Option<&crate::port::PortsConfig>,
) -> Result<(Direction, String), TcError> {
    if let Some(p) = ports {
        for (i, spec) in [&p.a, &p.b].into_iter().enumerate() {
            if !spec.iface.is_empty() && spec.iface == dev {
                let d = super::direction::of_egress(p.uplink, i);
                return Ok((
                    d,
                    format!(
                        "dev {dev} is port {} ({}): what leaves through it is the {}",
                        ["a", "b"][i],
                        p.port_name(i),
                        d.name()
                    ),
                ));
            }
        }
    }
    if dev.starts_with("ifb") {
        return Ok((
            Direction::Download,
            format!("dev {dev} is an IFB: the uplink's ingress, shaped as the download (what leaves towards the LAN)"),
        ));
    }
    match ports {
        Some(p) => Err(TcError::Direction {
            message: format!(
                "dev {dev} is neither port's interface (port a: '{}', port b: '{}') nor an ifb device; name the interfaces in [ports.a] and [ports.b] iface",
                p.a.iface, p.b.iface
            ),
        }),
        None => Ok((
            Direction::Upload,
            format!("dev {dev}: taken as the uplink (port b), whose egress is the upload; give --config to map it by the ports' interfaces"),
        )),
    }
}

/// Converts several tc cake commands (an egress cake on the uplink and an ingress cake on its
/// IFB, say) into one config: each `dev` is mapped to the direction it shaped
/// (`direction_of_dev`) and written as `[shaper.download]` / `[shaper.upload]`. One command
/// without `ports` converts as [`convert`] does, to `[shaper]`.
///
/// # Errors
/// A [`TcError`] naming the first word tc would refuse, or [`TcError::Direction`] when the
/// lines do not map onto the two directions.
pub fn convert_lines(
    input: &str,
    ports: Option<&crate::port::PortsConfig>,
) -> Result<Conversion, TcError> {
    let lines = split_commands(input);
    if lines.len() <= 1 && ports.is_none() {
        return convert(input);
    }
    let mut toml = String::new();
    let mut warnings = Vec::new();
    let mut seen: Vec<(Direction, String)> = Vec::new();
    let mut sections = Vec::new();
    for line in &lines {
        let cmd = parse_command(line)?;
        let Some(dev) = cmd.dev else {
            return Err(TcError::Direction {
                message: format!(
                    "'{line}' names no dev: with several tc commands each needs its 'dev', which says the direction it shapes"
                ),
            });
        };
        let (dir, why) = direction_of_dev(dev, ports)?;
        if let Some((_, other)) = seen.iter().find(|(d, _)| *d == dir) {
            return Err(TcError::Direction {
                message: format!(
                    "'{other}' and '{line}' both shape the {}; give one command per direction",
                    dir.name()
                ),
            });
        }
        seen.push((dir, line.clone()));
        let one = convert(line)?;
        warnings.extend(one.warnings);
        let mut options = CakeOptions::default();
        options.apply_words(&cmd.options)?;
        sections.push((dir, why, options, cmd.options.join(" ")));
    }
    sections.sort_by_key(|(d, ..)| *d);
    for w in &warnings {
        let _ = writeln!(toml, "# warning: {w}");
    }
    for (i, (dir, why, options, source)) in sections.iter().enumerate() {
        if i > 0 {
            toml.push('\n');
        }
        let _ = writeln!(toml, "# {why}");
        toml.push_str(&render_section(
            options,
            source,
            &format!("shaper.{}", dir.name()),
        ));
    }
    Ok(Conversion { toml, warnings })
}

/// Renders `options` as a `[shaper]` section, with `source` as a comment.
pub fn render(o: &CakeOptions, source: &str) -> String {
    render_section(o, source, "shaper")
}

/// Renders `options` as the table `[section]` (`shaper`, `shaper.upload`), with `source` as
/// a comment.
pub fn render_section(o: &CakeOptions, source: &str, section: &str) -> String {
    let mut out = String::new();
    if !source.is_empty() {
        let _ = writeln!(out, "# from tc: cake {source}");
    }
    let _ = writeln!(out, "[{section}]");
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k} = {v}");
    };
    if let Some(r) = o.rate {
        line("bandwidth", format!("\"{}\"", units::format_rate(r)));
    }
    if o.autorate_ingress == Some(true) {
        line("autorate_ingress", "true".to_string());
    }
    if let Some(v) = o.interval_ns {
        line("rtt", format!("\"{}\"", units::format_duration_ns(v)));
    }
    if let Some(v) = o.target_ns {
        line("target", format!("\"{}\"", units::format_duration_ns(v)));
    }
    if let Some(v) = o.diffserv {
        line("diffserv", format!("\"{}\"", keywords::diffserv_name(v)));
    }
    if let Some(v) = o.flow_mode {
        line("flow_mode", format!("\"{}\"", keywords::flow_mode_name(v)));
    }
    if let Some(v) = o.nat {
        line("nat", v.to_string());
    }
    if let Some(v) = o.wash {
        line("wash", v.to_string());
    }
    if let Some(v) = o.split_gso {
        line("split_gso", v.to_string());
    }
    if let Some(v) = o.ingress {
        line("ingress", v.to_string());
    }
    if let Some(v) = o.ack_filter {
        // As the config file writes it: false, true or "aggressive".
        let value = match v {
            AckFilterMode::Off => "false".to_string(),
            AckFilterMode::Filter => "true".to_string(),
            AckFilterMode::Aggressive => "\"aggressive\"".to_string(),
        };
        line("ack_filter", value);
    }
    if let Some(v) = o.memlimit {
        line("memlimit", format!("\"{}\"", units::format_size(v)));
    }
    if let Some(v) = o.fwmark {
        line("fwmark", format!("{v:#x}"));
    }
    if o.raw == Some(true) {
        line("raw", "true".to_string());
    } else if let Some(v) = o.overhead {
        line("overhead", v.to_string());
    }
    if let Some(v) = o.atm {
        let name = match v {
            AtmMode::None => "none",
            AtmMode::Atm => "atm",
            AtmMode::Ptm => "ptm",
        };
        line("atm", format!("\"{name}\""));
    }
    if let Some(v) = o.mpu {
        line("mpu", v.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use qdisc::cake::{AckFilterMode, CakeConfig, DiffservMode, FlowMode};

    /// Every option string of the kernel's tc-testing `qdiscs/cake.json`.
    pub(crate) const TC_TESTING: [&str; 18] = [
        "",
        "bandwidth 1000",
        "autorate-ingress",
        "rtt 200",
        "besteffort",
        "diffserv8",
        "diffserv4",
        "flowblind",
        "dsthost nat",
        "hosts wash",
        "flowblind no-split-gso",
        "dual-srchost ack-filter",
        "dual-dsthost ack-filter-aggressive",
        "memlimit 10000 ptm",
        "fwmark 8 atm",
        "overhead 128 mpu 256",
        "conservative ingress",
        "mpu 128",
    ];

    fn via_toml(options: &str) -> CakeConfig {
        let text = to_toml(options).unwrap();
        Config::from_toml_str(&text)
            .unwrap_or_else(|e| panic!("{options:?} -> {text}: {e}"))
            .shaper
            .cake
    }

    #[test]
    fn an_egress_cake_and_an_ifb_ingress_cake_convert_to_one_config() {
        use crate::config::direction::Direction;
        let c = convert_lines(
            "tc qdisc replace dev eth1 root cake bandwidth 45mbit docsis ack-filter\ntc qdisc replace dev ifb4eth1 root cake bandwidth 475mbit docsis ingress",
            None,
        )
        .unwrap();
        let cfg = Config::from_toml_str(&c.toml).unwrap();
        let (down, up) = (
            cfg.cake_for(Direction::Download),
            cfg.cake_for(Direction::Upload),
        );
        assert_eq!(down.rate.bits_per_sec(), 475_000_000);
        assert!(down.ingress && down.ack_filter == AckFilterMode::Off);
        assert_eq!(up.rate.bits_per_sec(), 45_000_000);
        assert!(!up.ingress && up.ack_filter == AckFilterMode::Filter);
        assert_eq!((up.overhead, down.overhead), (18, 18));
        // With the ports known, a dev is the direction leaving through the port carrying it.
        let ports: crate::port::PortsConfig = toml::from_str(
            "uplink = \"a\"\n[a]\nkind = \"afpacket\"\niface = \"wan0\"\n[b]\nkind = \"afpacket\"\niface = \"lan0\"",
        )
        .unwrap();
        let c = convert_lines(
            "tc qdisc add dev wan0 root cake bandwidth 20mbit tc qdisc add dev lan0 root cake bandwidth 100mbit",
            Some(&ports),
        )
        .unwrap();
        assert!(
            c.toml
                .contains("# dev wan0 is port a (a): what leaves through it is the upload\n"),
            "{}",
            c.toml
        );
        let cfg = Config::from_toml_str(&c.toml).unwrap();
        assert_eq!(
            cfg.cake_for(Direction::Upload).rate.bits_per_sec(),
            20_000_000
        );
        assert_eq!(
            cfg.cake_for(Direction::Download).rate.bits_per_sec(),
            100_000_000
        );
        for (input, want) in [
            (
                "tc qdisc add dev eth9 root cake",
                "dev eth9 is neither port's interface",
            ),
            (
                "tc qdisc add dev wan0 root cake; tc qdisc add dev wan0 root cake besteffort",
                "both shape the upload",
            ),
            (
                "bandwidth 1mbit; tc qdisc add dev lan0 root cake",
                "names no dev",
            ),
        ] {
            let e = convert_lines(input, Some(&ports)).unwrap_err().to_string();
            assert!(e.contains(want), "{input}: {e}");
        }
        // One command and no ports: [shaper], as before.
        let one = convert_lines("tc qdisc add dev eth0 root cake bandwidth 1mbit", None).unwrap();
        assert!(one.toml.contains("[shaper]\n"), "{}", one.toml);
    }

    #[test]
    fn every_tc_testing_string_converts_and_round_trips_through_toml() {
        for options in TC_TESTING {
            let direct = CakeOptions::parse(options).unwrap().to_cake_config();
            assert_eq!(via_toml(options), direct, "{options:?}");
            let prefixed = format!("tc qdisc add dev dummy0 handle 1: root cake {options}");
            assert_eq!(via_toml(&prefixed), direct, "{prefixed:?}");
        }
    }

    #[test]
    fn tc_testing_strings_mean_what_the_kernel_shows() {
        let c = via_toml("bandwidth 1000");
        assert_eq!(c.rate.to_string(), "1Kbit");
        assert!(via_toml("autorate-ingress").autorate_ingress);
        assert_eq!(via_toml("rtt 200").interval_ns, 200_000);
        assert_eq!(via_toml("besteffort").diffserv, DiffservMode::Besteffort);
        assert_eq!(via_toml("diffserv8").diffserv, DiffservMode::Diffserv8);
        let c = via_toml("dsthost nat");
        assert_eq!((c.flow_mode, c.nat), (FlowMode::Dsthost, true));
        let c = via_toml("hosts wash");
        assert_eq!((c.flow_mode, c.wash), (FlowMode::Hosts, true));
        assert!(!via_toml("flowblind no-split-gso").split_gso);
        assert_eq!(
            via_toml("dual-dsthost ack-filter-aggressive").ack_filter,
            AckFilterMode::Aggressive
        );
        let c = via_toml("memlimit 10000 ptm");
        assert_eq!((c.memlimit, c.atm), (Some(10000), AtmMode::Ptm));
        let c = via_toml("fwmark 8 atm");
        assert_eq!((c.fwmark_mask, c.atm), (8, AtmMode::Atm));
        let c = via_toml("overhead 128 mpu 256");
        assert_eq!((c.overhead, c.mpu, c.raw), (128, 256, false));
        let c = via_toml("conservative ingress");
        assert_eq!((c.overhead, c.atm, c.ingress), (48, AtmMode::Atm, true));
        assert_eq!(via_toml("mpu 128").mpu, 128);
    }

    #[test]
    fn command_prefixes_are_stripped() {
        for cmd in [
            "tc qdisc add dev eth0 root cake bandwidth 10mbit",
            "tc qdisc replace dev eth0 root cake bandwidth 10mbit",
            "tc qdisc change dev eth0 root cake bandwidth 10mbit",
            "qdisc add dev eth0 parent 1:1 handle 10: cake bandwidth 10mbit",
        ] {
            assert_eq!(option_words(cmd).unwrap(), vec!["bandwidth", "10mbit"]);
        }
        let e = to_toml("tc qdisc add dev eth0 root fq_codel").unwrap_err();
        assert!(e.to_string().contains("'fq_codel'"));
    }

    #[test]
    fn a_device_name_with_control_characters_still_gives_toml_that_loads() {
        // Found by the tc_options fuzz target: the name went raw into a comment, and a
        // control character there made the output unreadable as TOML.
        let toml = to_toml("tc qdisc add dev e\u{1}t\"h root cake bandwidth 10mbit").unwrap();
        assert!(toml.contains("# dev e\\u{1}t\\\"h:"), "{toml}");
        let c =
            crate::config::Config::from_toml_str(&toml).unwrap_or_else(|e| panic!("{toml}\n{e}"));
        assert_eq!(c.shaper.cake.rate.bits_per_sec(), 10_000_000);
    }

    #[test]
    fn commands_for_other_qdiscs_or_none_are_refused() {
        for (cmd, kind) in [
            ("tc qdisc add dev eth0 ingress", "ingress"),
            ("tc qdisc add dev eth0 handle ffff: ingress", "ingress"),
            ("tc qdisc add dev eth0 clsact", "clsact"),
            ("tc qdisc add dev eth0 root fq_codel", "fq_codel"),
            ("tc qdisc add dev eth0 root handle 1: htb default 10", "htb"),
            ("tc qdisc add dev eth0 parent 1:1 sfq", "sfq"),
        ] {
            let e = to_toml(cmd).unwrap_err();
            assert_eq!(
                e,
                TcError::NotCake {
                    qdisc: kind.to_string()
                },
                "{cmd}"
            );
            assert!(e.to_string().contains("is not cake"), "{e}");
        }
        let e = to_toml("tc qdisc add dev eth0 root").unwrap_err();
        assert!(e.to_string().contains("names no qdisc"), "{e}");
    }

    #[test]
    fn the_ack_filter_is_written_as_the_config_file_writes_it() {
        let t = to_toml("ack-filter").unwrap();
        assert!(t.contains("ack_filter = true\n"), "{t}");
        let t = to_toml("ack-filter-aggressive").unwrap();
        assert!(t.contains("ack_filter = \"aggressive\"\n"), "{t}");
        let t = to_toml("no-ack-filter").unwrap();
        assert!(t.contains("ack_filter = false\n"), "{t}");
    }

    #[test]
    fn the_dev_is_named_with_its_port_and_a_parent_is_warned_about() {
        let c = convert("tc qdisc replace dev eth0 root cake bandwidth 45mbit").unwrap();
        assert!(
            c.toml.contains("# dev eth0: tc shaped what leaves eth0")
                && c.toml
                    .contains("[ports.b] kind = \"afpacket\", iface = \"eth0\""),
            "{}",
            c.toml
        );
        assert!(c.warnings.is_empty());
        let c =
            convert("tc qdisc add dev eth0 parent 1:10 handle 10: cake bandwidth 20mbit").unwrap();
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0].contains("'parent 1:10'") && c.warnings[0].contains("hierarchy is lost"),
            "{:?}",
            c.warnings
        );
        assert!(c.toml.contains("# warning: 'parent 1:10'"), "{}", c.toml);
        // Bare options say nothing about a device.
        let c = convert("bandwidth 10mbit").unwrap();
        assert!(
            !c.toml.contains("dev") && c.warnings.is_empty(),
            "{}",
            c.toml
        );
    }

    #[test]
    fn cake_mq_refuses_autorate_ingress_like_the_kernel() {
        let e = to_toml("tc qdisc add dev eth0 root cake_mq autorate-ingress")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not supported by cake_mq"), "{e}");
        // The same reason as a config or live change that asks for it on several queues.
        assert!(e.contains(crate::config::AUTORATE_NEEDS_ONE_QUEUE), "{e}");
        assert!(to_toml("tc qdisc add dev eth0 root cake_mq bandwidth 1gbit diffserv4").is_ok());
        assert!(to_toml("tc qdisc add dev eth0 root cake autorate-ingress").is_ok());
    }

    #[test]
    fn invalid_strings_give_clear_errors() {
        let e = to_toml("bandwidth 100mbit diffserv7")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("unknown cake option 'diffserv7'"), "{e}");
        let e = to_toml("overhead lots").unwrap_err().to_string();
        assert!(
            e.contains("'lots' is not a whole number in decimal; give one from -64 to 256"),
            "{e}"
        );
        assert!(to_toml("memlimit").is_err());
    }
}
