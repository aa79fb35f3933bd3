//! The circuit model every importer fills: circuits (a subscriber's plan, download and
//! upload), the devices whose addresses belong to them, and the tree of nodes (sites, access
//! points) they hang under. Everything remembers the file and line it came from, so that
//! [`crate::validate`] can name them. Plain data, no I/O.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::prefix::Prefix;

/// Where an item was read: file name (as given) and 1-based line (0 when unknown).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    /// The file as named on the command line or in the configuration.
    pub file: Arc<str>,
    /// The 1-based line, or 0 when the format has no useful line (a whole file).
    pub line: usize,
}

/// The lines of a text, for the line of each of many byte offsets in O(log lines): counting
/// the newlines before each offset from the start made reading a file quadratic (5 s for a
/// network.json of 50 000 nodes).
#[derive(Debug, Clone)]
pub(crate) struct Lines {
    /// The offset of every newline, ascending.
    newlines: Vec<usize>,
    len: usize,
}

impl Lines {
    pub(crate) fn new(text: &str) -> Lines {
        Lines {
            newlines: text
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i)
                .collect(),
            len: text.len(),
        }
    }

    /// The 1-based line `offset` is on (0 beyond the text).
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        if offset > self.len {
            return 0;
        }
        self.newlines.partition_point(|&n| n < offset) + 1
    }
}

impl Origin {
    /// An origin in `file` at `line`.
    pub fn new(file: &Arc<str>, line: usize) -> Origin {
        Origin {
            file: Arc::clone(file),
            line,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file)
        } else {
            write!(f, "{}:{}", self.file, self.line)
        }
    }
}

/// One direction of a plan, in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// The most the circuit may send in this direction.
    pub max_bps: u64,
    /// The rate it is guaranteed while it has demand (LibreQoS's min; HTB's rate).
    pub min_bps: Option<u64>,
}

/// The queue a circuit direction asks for, from LibreQoS's `sqm` column or the TOML `sqm` key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SqmChoice {
    /// The box's default queue (CAKE with the link's options).
    #[default]
    Default,
    /// No queue management: only the plan's rate limit (LibreQoS's `none`).
    None,
    /// CAKE with these extra keywords over the defaults (`diffserv4`, `besteffort` …; may be
    /// empty for plain `cake`).
    Cake(String),
    /// `fq_codel` (LibreQoS accepts it; cakewalk shapes it as CAKE `besteffort flows`).
    FqCodel,
}

impl SqmChoice {
    /// Parses one direction's token list (`cake diffserv4`, `fq_codel`, `none`, or empty).
    pub fn parse(text: &str) -> Result<SqmChoice, String> {
        let mut words = text.split_whitespace();
        let Some(first) = words.next() else {
            return Ok(SqmChoice::Default);
        };
        let rest: Vec<&str> = words.collect();
        match first.to_ascii_lowercase().as_str() {
            "none" if rest.is_empty() => Ok(SqmChoice::None),
            "fq_codel" if rest.is_empty() => Ok(SqmChoice::FqCodel),
            "cake" => Ok(SqmChoice::Cake(rest.join(" "))),
            // LibreQoS also accepts bare CAKE keywords (`diffserv4`).
            w if w.starts_with("diffserv")
                || matches!(w, "besteffort" | "precedence" | "ack-filter" | "wash") =>
            {
                Ok(SqmChoice::Cake(
                    text.split_whitespace().collect::<Vec<_>>().join(" "),
                ))
            }
            _ => Err(format!(
                "sqm `{text}` is not understood: use `cake [KEYWORDS]`, `fq_codel` or `none`, \
                 or `DOWN/UP` for one per direction"
            )),
        }
    }
}

impl fmt::Display for SqmChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqmChoice::Default => f.write_str("default"),
            SqmChoice::None => f.write_str("none"),
            SqmChoice::Cake(k) if k.is_empty() => f.write_str("cake"),
            SqmChoice::Cake(k) => write!(f, "cake {k}"),
            SqmChoice::FqCodel => f.write_str("fq_codel"),
        }
    }
}

/// Per-direction queue overrides (`down/up` in LibreQoS's `sqm`, one value for both).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sqm {
    /// Towards the subscriber.
    pub download: SqmChoice,
    /// From the subscriber.
    pub upload: SqmChoice,
}

impl Sqm {
    /// Parses `TOKENS` (both directions) or `DOWN/UP`.
    pub fn parse(text: &str) -> Result<Sqm, String> {
        match text.split_once('/') {
            Some((down, up)) => Ok(Sqm {
                download: SqmChoice::parse(down)?,
                upload: SqmChoice::parse(up)?,
            }),
            None => {
                let both = SqmChoice::parse(text)?;
                Ok(Sqm {
                    download: both.clone(),
                    upload: both,
                })
            }
        }
    }
}

/// A subscriber: one plan, one or more devices.
#[derive(Debug, Clone, PartialEq)]
pub struct Circuit {
    /// Unique ID (LibreQoS's `Circuit ID`).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Towards the subscriber.
    pub download: Plan,
    /// From the subscriber.
    pub upload: Plan,
    /// The node it hangs under, by name; `None` at the root.
    pub parent: Option<String>,
    /// Queue overrides.
    pub sqm: Sqm,
    /// Indices into [`CircuitSet::devices`].
    pub devices: Vec<usize>,
    /// Where the circuit was first defined.
    pub origin: Origin,
}

/// One device of a circuit (a CPE, a router): its addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// Device ID (unique per file).
    pub id: String,
    /// Display name.
    pub name: String,
    /// MAC address, when given.
    pub mac: Option<[u8; 6]>,
    /// Its addresses and prefixes, IPv4 and IPv6.
    pub prefixes: Vec<Prefix>,
    /// Free text.
    pub comment: String,
    /// Index into [`CircuitSet::circuits`].
    pub circuit: usize,
    /// Where it was defined.
    pub origin: Origin,
}

/// A node of the network tree (a site, an access point, a backhaul).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Unique name (circuits refer to it as their parent).
    pub name: String,
    /// Download cap in bits per second, if any.
    pub download_bps: Option<u64>,
    /// Upload cap in bits per second, if any.
    pub upload_bps: Option<u64>,
    /// Index of the parent node; `None` for a top-level node.
    pub parent: Option<usize>,
    /// A virtual node groups for reporting but does not shape (LibreQoS's `"virtual": true`).
    pub is_virtual: bool,
    /// Where it was defined.
    pub origin: Origin,
}

/// Everything loaded from the circuit files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CircuitSet {
    /// Circuits, in file order.
    pub circuits: Vec<Circuit>,
    /// Devices, in file order.
    pub devices: Vec<Device>,
    /// Nodes, parents before children.
    pub nodes: Vec<Node>,
}

/// The circuits' IDs and the nodes' names with their indexes, for code that looks up many:
/// built in one pass, where [`CircuitSet::circuit_by_id`] and [`CircuitSet::node_by_name`]
/// scan (through them, reading a ShapedDevices.csv of 100 000 circuits took 8 s, of
/// 200 000 34 s). A repeated name keeps its first index, as those methods answer.
#[derive(Debug, Clone, Default)]
pub struct Names {
    circuits: HashMap<String, usize>,
    nodes: HashMap<String, usize>,
}

impl Names {
    /// The names of everything in `set`.
    pub fn of(set: &CircuitSet) -> Names {
        let mut names = Names::default();
        for (i, c) in set.circuits.iter().enumerate() {
            names.add_circuit(&c.id, i);
        }
        for (i, n) in set.nodes.iter().enumerate() {
            names.add_node(&n.name, i);
        }
        names
    }

    /// Index of the circuit with this ID.
    pub fn circuit(&self, id: &str) -> Option<usize> {
        self.circuits.get(id).copied()
    }

    /// Index of the node with this name.
    pub fn node(&self, name: &str) -> Option<usize> {
        self.nodes.get(name).copied()
    }

    /// Records circuit `index` under `id`, unless an earlier circuit has that ID.
    pub fn add_circuit(&mut self, id: &str, index: usize) {
        if !self.circuits.contains_key(id) {
            self.circuits.insert(id.to_string(), index);
        }
    }

    /// Records node `index` under `name`, unless an earlier node has that name.
    pub fn add_node(&mut self, name: &str, index: usize) {
        if !self.nodes.contains_key(name) {
            self.nodes.insert(name.to_string(), index);
        }
    }
}

impl CircuitSet {
    /// Index of the circuit with this ID (a scan: [`Names`] for many lookups).
    pub fn circuit_by_id(&self, id: &str) -> Option<usize> {
        self.circuits.iter().position(|c| c.id == id)
    }

    /// Index of the node with this name (a scan: [`Names`] for many lookups).
    pub fn node_by_name(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Every prefix with the circuit it belongs to and the device that named it.
    pub fn prefixes(&self) -> impl Iterator<Item = (Prefix, usize, &Device)> + '_ {
        self.devices
            .iter()
            .flat_map(|d| d.prefixes.iter().map(move |p| (*p, d.circuit, d)))
    }

    /// Adds the circuits and devices of `other` (nodes too), renumbering its indices.
    pub fn merge(&mut self, other: CircuitSet) {
        let (c0, d0, n0) = (self.circuits.len(), self.devices.len(), self.nodes.len());
        self.circuits
            .extend(other.circuits.into_iter().map(|mut c| {
                c.devices.iter_mut().for_each(|d| *d += d0);
                c
            }));
        self.devices.extend(other.devices.into_iter().map(|mut d| {
            d.circuit += c0;
            d
        }));
        self.nodes.extend(other.nodes.into_iter().map(|mut n| {
            n.parent = n.parent.map(|p| p + n0);
            n
        }));
    }
}

/// Megabits per second as written in the files (decimals allowed) to bits per second.
pub fn mbps_to_bps(text: &str) -> Result<u64, String> {
    let t = text.trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1.0e9).contains(&v) => Ok((v * 1.0e6).round() as u64),
        _ => Err(format!(
            "`{t}` is not a rate in Mbps (a number such as 100 or 2.5)"
        )),
    }
}

/// Parses a MAC address written `aa:bb:cc:dd:ee:ff` or with `-`.
pub fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let t = text.trim();
    let parts: Vec<&str> = t.split([':', '-']).collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("`{t}` is not a MAC address (aa:bb:cc:dd:ee:ff)"));
    }
    for (b, p) in mac.iter_mut().zip(&parts) {
        *b = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| format!("`{t}` is not a MAC address (aa:bb:cc:dd:ee:ff)"))?;
    }
    Ok(mac)
}

/// Bits per second as a short human rate (`12.5 Mbit/s`).
pub fn show_rate(bps: u64) -> String {
    let v = bps as f64;
    if bps >= 1_000_000_000 {
        format!("{} Gbit/s", v / 1e9)
    } else if bps >= 1_000_000 {
        format!("{} Mbit/s", v / 1e6)
    } else {
        format!("{} kbit/s", v / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqm_reads_libreqos_forms() {
        assert_eq!(Sqm::parse("").unwrap(), Sqm::default());
        let s = Sqm::parse("cake diffserv4").unwrap();
        assert_eq!(s.download, SqmChoice::Cake("diffserv4".into()));
        assert_eq!(s.upload, s.download);
        let s = Sqm::parse("none/cake").unwrap();
        assert_eq!(
            (s.download, s.upload),
            (SqmChoice::None, SqmChoice::Cake(String::new()))
        );
        assert_eq!(Sqm::parse("fq_codel").unwrap().upload, SqmChoice::FqCodel);
        assert_eq!(
            Sqm::parse("diffserv8").unwrap().upload,
            SqmChoice::Cake("diffserv8".into())
        );
        assert!(Sqm::parse("htb").unwrap_err().contains("not understood"));
    }

    #[test]
    fn lines_count_the_newlines_before_an_offset() {
        for text in ["", "a", "\n", "ab\ncd\n\nef", "\n\nx\n"] {
            let lines = Lines::new(text);
            for offset in 0..=text.len() {
                let want = text[..offset].matches('\n').count() + 1;
                assert_eq!(lines.line_of(offset), want, "{text:?} at {offset}");
            }
            assert_eq!(lines.line_of(text.len() + 1), 0, "beyond {text:?}");
        }
    }

    #[test]
    fn names_answer_as_the_scans_do() {
        let mut text = String::new();
        for n in 0..50 {
            let parent = if n > 0 {
                format!("parent = \"n{}\"\n", n / 2)
            } else {
                String::new()
            };
            text += &format!("[[node]]\nname = \"n{n}\"\n{parent}");
        }
        for c in 0..300 {
            text += &format!(
                "[[circuit]]\nid = \"c{c}\"\ndownload_mbps = 10\nupload_mbps = 2\n\
                 parent = \"n{}\"\naddresses = [\"10.0.{}.{}\"]\n",
                c % 50,
                c / 256,
                c % 256
            );
        }
        let mut problems = Vec::new();
        let set = crate::native::import("t.toml", &text, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let names = Names::of(&set);
        for probe in (0..320)
            .map(|c| format!("c{c}"))
            .chain(["".into(), "n1".into()])
        {
            assert_eq!(names.circuit(&probe), set.circuit_by_id(&probe), "{probe}");
        }
        for probe in (0..60).map(|n| format!("n{n}")).chain(["c1".into()]) {
            assert_eq!(names.node(&probe), set.node_by_name(&probe), "{probe}");
        }
        // A repeated name keeps its first index.
        let mut names = Names::default();
        names.add_circuit("x", 3);
        names.add_circuit("x", 7);
        names.add_node("y", 1);
        names.add_node("y", 0);
        assert_eq!((names.circuit("x"), names.node("y")), (Some(3), Some(1)));
    }

    #[test]
    fn rates_and_macs_parse_or_say_why() {
        assert_eq!(mbps_to_bps("2.5").unwrap(), 2_500_000);
        assert_eq!(mbps_to_bps(" 100 ").unwrap(), 100_000_000);
        assert!(mbps_to_bps("-1").is_err());
        assert!(mbps_to_bps("fast").is_err());
        assert!(mbps_to_bps("NaN").is_err());
        assert_eq!(
            parse_mac("02:00:00:0a:0B:ff").unwrap(),
            [2, 0, 0, 10, 11, 255]
        );
        assert!(parse_mac("02:00:00:0a:0b").is_err());
        assert!(parse_mac("02:00:00:0a:0b:+f").is_err());
        assert_eq!(show_rate(2_500_000), "2.5 Mbit/s");
        assert_eq!(show_rate(10_000_000_000), "10 Gbit/s");
    }
}
