//! Checks a loaded [`CircuitSet`] as a whole, after every file was imported: prefixes shared
//! or overlapping between circuits (a packet could not tell which plan it belongs to), parents
//! that name no node, minimum rates above the maximum, zero rates, circuits without an
//! address, duplicate device IDs and node names. Each problem names the lines involved.

use std::collections::HashMap;

use crate::model::{CircuitSet, Names};
use crate::problem::Problem;

/// Every problem of `set`. `have_network` says whether a node tree was loaded: without one,
/// a circuit's parent cannot be checked and is only a warning.
pub fn validate(set: &CircuitSet, have_network: bool) -> Vec<Problem> {
    let mut problems = Vec::new();
    let names = Names::of(set);
    for c in &set.circuits {
        for (dir, plan) in [("download", c.download), ("upload", c.upload)] {
            if plan.max_bps == 0 {
                problems.push(Problem::error(
                    &c.origin,
                    format!(
                        "circuit `{}`: {dir} max rate is 0: give it its plan's rate",
                        c.id
                    ),
                ));
            }
            if let Some(min) = plan.min_bps {
                if min > plan.max_bps {
                    problems.push(Problem::error(
                        &c.origin,
                        format!(
                            "circuit `{}`: {dir} min {} is above its max {}: the min is what it \
                             is guaranteed, at most the max",
                            c.id,
                            crate::model::show_rate(min),
                            crate::model::show_rate(plan.max_bps)
                        ),
                    ));
                }
            }
        }
        if c.devices
            .iter()
            .all(|&d| set.devices[d].prefixes.is_empty())
        {
            problems.push(Problem::error(
                &c.origin,
                format!(
                    "circuit `{}` has no address: give one of its devices an IPv4 or IPv6 \
                     address or prefix",
                    c.id
                ),
            ));
        }
        if let Some(parent) = &c.parent {
            match names.node(parent) {
                Some(_) => {}
                None if have_network => problems.push(Problem::error(
                    &c.origin,
                    format!(
                        "circuit `{}`: parent node `{parent}` is not in the network file",
                        c.id
                    ),
                )),
                None => problems.push(Problem::warning(
                    &c.origin,
                    format!(
                        "circuit `{}`: parent node `{parent}` not checked (no network file given)",
                        c.id
                    ),
                )),
            }
        }
    }
    let mut device_ids: HashMap<&str, usize> = HashMap::new();
    for (i, d) in set.devices.iter().enumerate() {
        if d.id.is_empty() {
            continue;
        }
        if let Some(&first) = device_ids.get(d.id.as_str()) {
            problems.push(Problem::error(
                &d.origin,
                format!(
                    "device ID `{}` is used again (first at {}): device IDs must be unique",
                    d.id, set.devices[first].origin
                ),
            ));
        } else {
            device_ids.insert(&d.id, i);
        }
    }
    let mut node_names: HashMap<&str, usize> = HashMap::new();
    for (i, n) in set.nodes.iter().enumerate() {
        if let Some(&first) = node_names.get(n.name.as_str()) {
            problems.push(Problem::error(
                &n.origin,
                format!(
                    "node name `{}` is used again (first at {}): circuits name their parent, \
                     so node names must be unique",
                    n.name, set.nodes[first].origin
                ),
            ));
        } else {
            node_names.insert(&n.name, i);
        }
    }
    overlaps(set, &mut problems);
    problems
}

/// Prefixes of different circuits that are equal or nested. Sorted by address then length,
/// nested prefixes are adjacent runs: a stack of the prefixes that contain the current one
/// finds each overlap in one pass.
fn overlaps(set: &CircuitSet, problems: &mut Vec<Problem>) {
    let mut all: Vec<_> = set.prefixes().collect();
    all.sort_by_key(|a| a.0);
    let mut stack: Vec<usize> = Vec::new();
    for i in 0..all.len() {
        let (p, circuit, device) = all[i];
        while let Some(&top) = stack.last() {
            if all[top].0.contains(&p) {
                break;
            }
            stack.pop();
        }
        if let Some(&top) = stack.last() {
            let (q, other, other_device) = all[top];
            if other != circuit {
                let how = if q == p { "is also" } else { "lies inside" };
                problems.push(Problem::error(
                    &device.origin,
                    format!(
                        "{p} of circuit `{}` {how} {q} of circuit `{}` ({}): a packet must \
                         belong to one circuit",
                        set.circuits[circuit].id, set.circuits[other].id, other_device.origin
                    ),
                ));
            }
        }
        stack.push(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shaped_devices;

    fn check(rows: &str, have_network: bool) -> Vec<String> {
        let text = format!(
            "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n{rows}"
        );
        let mut problems = Vec::new();
        let set = shaped_devices::import("sd.csv", &text, &mut problems);
        assert_eq!(problems, vec![]);
        validate(&set, have_network)
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn a_clean_file_has_no_problems() {
        assert_eq!(
            check("1,a,1,d,,,100.64.0.0/30,2001:db8::/64,1,1,10,10,\n2,b,2,d,,,100.64.0.4/30,2001:db8:0:1::/64,,,10,10,\n", true),
            Vec::<String>::new()
        );
    }

    #[test]
    fn overlapping_and_duplicate_prefixes_name_both_lines() {
        let p = check(
            "1,a,1,d,,,100.64.0.0/29,,,,10,10,\n2,b,2,d,,,100.64.0.5,,,,10,10,\n3,c,3,d,,,,2001:db8::/48,,,10,10,\n4,e,4,d,,,,2001:db8::/48,,,10,10,\n",
            true,
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0], "sd.csv:3: error: 100.64.0.5/32 of circuit `2` lies inside 100.64.0.0/29 of circuit `1` (sd.csv:2): a packet must belong to one circuit");
        assert!(p[1].starts_with("sd.csv:5: error: 2001:db8::/48 of circuit `4` is also 2001:db8::/48 of circuit `3` (sd.csv:4)"));
    }

    #[test]
    fn the_same_circuit_may_repeat_or_nest_its_own_prefixes() {
        assert!(check(
            "1,a,1,d,,,\"100.64.0.0/29, 100.64.0.1\",,,,10,10,\n1,a,2,d,,,100.64.0.1,,,,10,10,\n",
            true
        )
        .is_empty());
    }

    #[test]
    fn rates_parents_addresses_and_ids() {
        let p = check(
            "1,a,1,d,AP,,100.64.0.1,,20,,10,0,\n2,b,1,d,,,,,,,10,10,\n",
            true,
        );
        assert!(
            p[0].contains("sd.csv:2")
                && p[0].contains("download min 20 Mbit/s is above its max 10 Mbit/s")
        );
        assert!(p[1].contains("upload max rate is 0"));
        assert!(p[2].contains("parent node `AP` is not in the network file"));
        assert!(p[3].contains("sd.csv:3") && p[3].contains("has no address"));
        assert!(p[4].contains("device ID `1` is used again (first at sd.csv:2)"));
        let p = check("1,a,1,d,AP,,100.64.0.1,,,,10,10,\n", false);
        assert!(p[0].contains("warning") && p[0].contains("not checked"));
    }
}
