//! One box's part of the tree: when an ISP splits its network across several boxes by node
//! (docs/circuits.md, "Several boxes"), each box loads the same files and keeps only the
//! circuits under the nodes it serves, with those nodes' subtrees (virtual nodes included)
//! and the nodes on the path to the root, whose caps still bound what this box carries.
//! Pure selection over a loaded [`CircuitSet`]; the forwarder applies it after
//! [`crate::load`], `check-circuits --serve-node` shows its result.

use crate::model::{Circuit, CircuitSet, Device, Names, Node};

/// The name that selects the circuits with no parent node (they hang at the root).
pub const ROOT: &str = "(root)";

/// A name of the filter that is no node of the loaded files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("serve_nodes names `{name}`, which is not a node of the network file{}; use a node's exact name, or \"(root)\" for the circuits without a parent node", hint(.suggestions))]
pub struct UnknownNode {
    /// The name as written.
    pub name: String,
    /// Node names close to it (at most three, closest first).
    pub suggestions: Vec<String>,
}

fn hint(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
        format!(" (did you mean {}?)", names.join(", "))
    }
}

/// The part of `set` a box serving `names` carries: the circuits whose parent is one of the
/// named nodes or below one (and those without a parent when `names` holds [`ROOT`]), their
/// devices, the named nodes' subtrees and every ancestor of a named node. Indices are
/// renumbered; the order of the files is kept. No name at all keeps the whole set.
///
/// # Errors
/// [`UnknownNode`] for the first name that is neither a node nor [`ROOT`], with close names.
pub fn serve_nodes<S: AsRef<str>>(
    set: &CircuitSet,
    names: &[S],
) -> Result<CircuitSet, UnknownNode> {
    if names.is_empty() {
        return Ok(set.clone());
    }
    let n = set.nodes.len();
    let lookup = Names::of(set);
    let mut named = vec![false; n];
    let mut root = false;
    for name in names {
        let name = name.as_ref();
        if name == ROOT {
            root = true;
            continue;
        }
        match lookup.node(name) {
            Some(i) => named[i] = true,
            None => {
                return Err(UnknownNode {
                    name: name.to_string(),
                    suggestions: close_names(name, set.nodes.iter().map(|n| n.name.as_str())),
                })
            }
        }
    }
    // A node is served when it or an ancestor is named; it is kept when served or when it is
    // an ancestor of a served node. Walks are bounded by the node count, so a parent cycle
    // (refused by validation anyway) cannot loop.
    let ancestors = |i: usize| {
        let mut at = Some(i);
        std::iter::from_fn(move || {
            let here = at?;
            at = set.nodes[here].parent;
            Some(here)
        })
        .take(n)
    };
    let served: Vec<bool> = (0..n).map(|i| ancestors(i).any(|a| named[a])).collect();
    let mut kept = vec![false; n];
    for i in (0..n).filter(|&i| served[i]) {
        ancestors(i).for_each(|a| kept[a] = true);
    }
    let mut new_index = vec![None; n];
    let mut nodes: Vec<Node> = Vec::new();
    for i in (0..n).filter(|&i| kept[i]) {
        new_index[i] = Some(nodes.len());
        nodes.push(set.nodes[i].clone());
    }
    for node in &mut nodes {
        node.parent = node.parent.and_then(|p| new_index[p]);
    }
    let carried = |c: &Circuit| match &c.parent {
        None => root,
        Some(p) => lookup.node(p).is_some_and(|i| served[i]),
    };
    let mut circuits: Vec<Circuit> = Vec::new();
    let mut devices: Vec<Device> = Vec::new();
    for c in set.circuits.iter().filter(|c| carried(c)) {
        let mut c = c.clone();
        let at = circuits.len();
        for d in &mut c.devices {
            let mut device = set.devices[*d].clone();
            device.circuit = at;
            *d = devices.len();
            devices.push(device);
        }
        circuits.push(c);
    }
    Ok(CircuitSet {
        circuits,
        devices,
        nodes,
    })
}

/// Up to three of `names` close to `wanted`: equal but for case, containing it or contained
/// in it (case-insensitive), or within a small edit distance; closest first.
fn close_names<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let w = wanted.to_lowercase();
    let limit = (w.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = names
        .filter_map(|name| {
            let l = name.to_lowercase();
            let d = edit_distance(&w, &l);
            let near = d <= limit || (!w.is_empty() && (l.contains(&w) || w.contains(&l)));
            near.then_some((d, name))
        })
        .collect();
    scored.sort_by_key(|&(d, _)| d);
    scored
        .into_iter()
        .take(3)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != *cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Core > {Site A > {AP 1, Virtual V > AP 2}, Site B > AP 3}; a circuit on each AP,
    /// one on Site A itself and one with no parent.
    fn tree() -> CircuitSet {
        let csv = "\
Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment
c1,One,d1,cpe,AP 1,,100.64.0.1,,,,100,20,
c2,Two,d2,cpe,AP 2,,100.64.0.2,,,,100,20,
c2,Two,d2b,cpe,AP 2,,100.64.0.12,,,,100,20,
c3,Three,d3,cpe,AP 3,,100.64.0.3,,,,100,20,
c4,Four,d4,cpe,Site A,,100.64.0.4,,,,100,20,
c5,Five,d5,cpe,,,100.64.0.5,,,,100,20,
";
        let json = r#"{
  "Core": {"downloadBandwidthMbps": 1000, "uploadBandwidthMbps": 1000, "children": {
    "Site A": {"downloadBandwidthMbps": 500, "uploadBandwidthMbps": 500, "children": {
      "AP 1": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 200},
      "Virtual V": {"virtual": true, "downloadBandwidthMbps": 300, "uploadBandwidthMbps": 300, "children": {
        "AP 2": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 200}}}}},
    "Site B": {"downloadBandwidthMbps": 500, "uploadBandwidthMbps": 500, "children": {
      "AP 3": {"downloadBandwidthMbps": 200, "uploadBandwidthMbps": 200}}}}}
}"#;
        let (set, _) = crate::load([
            (crate::Format::ShapedDevices, "ShapedDevices.csv", csv),
            (crate::Format::NetworkJson, "network.json", json),
        ])
        .expect("the tree loads");
        set
    }

    fn ids(set: &CircuitSet) -> Vec<&str> {
        set.circuits.iter().map(|c| c.id.as_str()).collect()
    }

    fn node_names(set: &CircuitSet) -> Vec<&str> {
        set.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn a_site_carries_its_subtree_virtual_nodes_included_and_its_ancestors() {
        let set = tree();
        let part = serve_nodes(&set, &["Site A"]).unwrap();
        assert_eq!(ids(&part), ["c1", "c2", "c4"]);
        assert_eq!(
            node_names(&part),
            ["Core", "Site A", "AP 1", "Virtual V", "AP 2"]
        );
        // Parents point into the new numbering; devices follow their circuits.
        let parent = |name: &str| {
            let i = part.node_by_name(name).unwrap();
            part.nodes[i].parent.map(|p| part.nodes[p].name.as_str())
        };
        assert_eq!(parent("AP 2"), Some("Virtual V"));
        assert_eq!(parent("Site A"), Some("Core"));
        assert_eq!(parent("Core"), None);
        assert_eq!(part.devices.len(), 4);
        for (ci, c) in part.circuits.iter().enumerate() {
            for &d in &c.devices {
                assert_eq!(part.devices[d].circuit, ci, "device of {}", c.id);
            }
        }
        // The part is still a valid set, and its prefix table answers for its own circuits.
        assert!(crate::validate::validate(&part, true).is_empty());
        let table = crate::prefix_table(&part).unwrap();
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(
            table.lookup(ip("100.64.0.12")).map(|c| c as usize),
            part.circuit_by_id("c2")
        );
        assert_eq!(table.lookup(ip("100.64.0.3")), None);
    }

    #[test]
    fn a_leaf_keeps_only_its_path_and_names_add_up() {
        let set = tree();
        let part = serve_nodes(&set, &["AP 2"]).unwrap();
        assert_eq!(ids(&part), ["c2"]);
        assert_eq!(node_names(&part), ["Core", "Site A", "Virtual V", "AP 2"]);
        let part = serve_nodes(&set, &["AP 1", "AP 3"]).unwrap();
        assert_eq!(ids(&part), ["c1", "c3"]);
        assert_eq!(
            node_names(&part),
            ["Core", "Site A", "AP 1", "Site B", "AP 3"]
        );
        // A virtual node serves what is under it.
        assert_eq!(ids(&serve_nodes(&set, &["Virtual V"]).unwrap()), ["c2"]);
    }

    #[test]
    fn circuits_without_a_parent_only_under_root() {
        let set = tree();
        assert!(!ids(&serve_nodes(&set, &["Core"]).unwrap()).contains(&"c5"));
        let part = serve_nodes(&set, &[ROOT]).unwrap();
        assert_eq!(ids(&part), ["c5"]);
        assert!(part.nodes.is_empty());
        let all = serve_nodes(&set, &["Core", ROOT]).unwrap();
        assert_eq!(
            all, set,
            "the top node and the root together are everything"
        );
        assert_eq!(serve_nodes::<&str>(&set, &[]).unwrap(), set);
    }

    #[test]
    fn an_unknown_name_is_refused_with_close_names() {
        let set = tree();
        let e = serve_nodes(&set, &["site a"]).unwrap_err();
        assert_eq!(e.name, "site a");
        assert_eq!(e.suggestions[0], "Site A");
        let text = e.to_string();
        assert!(
            text.contains("`site a`") && text.contains("did you mean `Site A`"),
            "{text}"
        );
        assert!(text.contains("(root)"), "{text}");
        let e = serve_nodes(&set, &["AP 9"]).unwrap_err();
        assert!(e.suggestions.iter().all(|s| s.starts_with("AP")), "{e:?}");
        let e = serve_nodes(&set, &["Backhaul North"]).unwrap_err();
        assert!(e.suggestions.is_empty(), "{e:?}");
        assert!(!e.to_string().contains("did you mean"), "{e}");
    }

    #[test]
    fn edit_distance_counts_single_changes() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("ap 7", "ap 1"), 1);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
