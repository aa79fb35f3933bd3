//! LibreQoS's `network.json`: the tree of nodes (sites, access points) that circuits hang
//! under. The top level is an object whose keys are node names; each node is an object with
//! `downloadBandwidthMbps`, `uploadBandwidthMbps`, optional `children` (an object of the same
//! shape) and optional `virtual` (a node that groups for reporting but does not shape).
//! Other keys (`type`, `id`, coordinates) are ignored. An empty object (`{}`) is a flat
//! network. Node names must be unique: circuits refer to their parent by name.

use std::sync::Arc;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::model::{CircuitSet, Lines, Node, Origin};
use crate::problem::Problem;

/// Most nesting accepted (LibreQoS trees are a handful of levels; this bounds the recursion).
pub const MAX_DEPTH: usize = 32;

/// Reads `text` (the contents of `file`) into nodes, parents before children.
pub fn import(file: &str, text: &str, problems: &mut Vec<Problem>) -> CircuitSet {
    let file: Arc<str> = Arc::from(file);
    let mut set = CircuitSet::default();
    let root: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            problems.push(Problem::error(
                &Origin::new(&file, e.line()),
                format!("not valid JSON: {e}"),
            ));
            return set;
        }
    };
    let Value::Object(top) = root else {
        problems.push(Problem::error(
            &Origin::new(&file, 1),
            "network.json must be an object of nodes by name ({} for a flat network)",
        ));
        return set;
    };
    let mut walk = Walk {
        file,
        text,
        lines: Lines::new(text),
        search_from: 0,
        set: &mut set,
        problems,
    };
    walk.nodes(&top, None, 0);
    set
}

struct Walk<'a> {
    file: Arc<str>,
    text: &'a str,
    /// Nodes appear in the text in the order they are walked (the map keeps file order), so
    /// each name is searched for after the previous one.
    search_from: usize,
    lines: Lines,
    set: &'a mut CircuitSet,
    problems: &'a mut Vec<Problem>,
}

impl Walk<'_> {
    /// The line of `"name":` at or after the last node found.
    fn line_of(&mut self, name: &str) -> usize {
        let quoted = serde_json::to_string(name).unwrap_or_default();
        let rest = self.text.get(self.search_from..).unwrap_or("");
        let mut at = 0;
        while let Some(i) = rest[at..].find(&quoted) {
            let after = at + i + quoted.len();
            if rest[after..].trim_start().starts_with(':') {
                let abs = self.search_from + at + i;
                self.search_from = abs + quoted.len();
                return self.lines.line_of(abs);
            }
            at = after;
        }
        0
    }

    fn nodes(&mut self, map: &[(String, Value)], parent: Option<usize>, depth: usize) {
        for (name, value) in map {
            let fields = |key: &str| value.field(key);
            let line = self.line_of(name);
            let origin = Origin::new(&self.file, line);
            if depth >= MAX_DEPTH {
                self.problems.push(Problem::error(
                    &origin,
                    format!("node `{name}` is nested deeper than {MAX_DEPTH} levels"),
                ));
                return;
            }
            let Value::Object(_) = value else {
                self.problems.push(Problem::error(
                    &origin,
                    format!("node `{name}` must be an object with downloadBandwidthMbps and uploadBandwidthMbps"),
                ));
                continue;
            };
            let cap = |key: &str, problems: &mut Vec<Problem>| -> Option<u64> {
                match fields(key) {
                    None | Some(Value::Null) => None,
                    Some(Value::Number(v)) => match *v {
                        v if v.is_finite() && (0.0..=1.0e9).contains(&v) => {
                            Some((v * 1.0e6).round() as u64)
                        }
                        n => {
                            problems.push(Problem::error(
                                &origin,
                                format!("node `{name}`: {key} {n} is not a rate in Mbps"),
                            ));
                            None
                        }
                    },
                    Some(Value::String(s)) => match crate::model::mbps_to_bps(s) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            problems.push(Problem::error(
                                &origin,
                                format!("node `{name}`: {key}: {e}"),
                            ));
                            None
                        }
                    },
                    Some(other) => {
                        problems.push(Problem::error(
                            &origin,
                            format!(
                                "node `{name}`: {key} must be a number of Mbps, not {}",
                                other.kind()
                            ),
                        ));
                        None
                    }
                }
            };
            let download_bps = cap("downloadBandwidthMbps", self.problems);
            let upload_bps = cap("uploadBandwidthMbps", self.problems);
            let is_virtual = match fields("virtual") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    self.problems.push(Problem::error(
                        &origin,
                        format!(
                            "node `{name}`: virtual must be true or false, not {}",
                            other.kind()
                        ),
                    ));
                    false
                }
            };
            if !is_virtual && (download_bps.is_none() || upload_bps.is_none()) {
                self.problems.push(Problem::warning(
                    &origin,
                    format!("node `{name}` has no download or upload cap: it does not limit its children"),
                ));
            }
            self.set.nodes.push(Node {
                name: name.clone(),
                download_bps,
                upload_bps,
                parent,
                is_virtual,
                origin: origin.clone(),
            });
            let me = self.set.nodes.len() - 1;
            match fields("children") {
                None | Some(Value::Null) => {}
                Some(Value::Object(children)) => self.nodes(children, Some(me), depth + 1),
                Some(_) => self.problems.push(Problem::error(
                    &origin,
                    format!("node `{name}`: children must be an object of nodes by name"),
                )),
            }
        }
    }
}

/// A JSON value whose objects keep the file's order (serde_json's own map is sorted unless
/// a feature that would change every other map in the workspace is on).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array,
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The last value of `key` in an object (JSON's usual duplicate rule).
    fn field(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(fields) => fields.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array => "an array",
            Value::Object(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
                Ok(Value::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
                Ok(Value::Number(n as f64))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
                Ok(Value::Number(n as f64))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
                Ok(Value::Number(n))
            }
            fn visit_str<E>(self, s: &str) -> Result<Value, E> {
                Ok(Value::String(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                while seq.next_element::<Value>()?.is_some() {}
                Ok(Value::Array)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    fields.push((k, v));
                }
                Ok(Value::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
  "Site_1": {
    "downloadBandwidthMbps": 1000,
    "uploadBandwidthMbps": 1000,
    "type": "Site",
    "children": {
      "AP_A": {
        "downloadBandwidthMbps": 500,
        "uploadBandwidthMbps": 500.5
      },
      "Site_3": {
        "downloadBandwidthMbps": 500,
        "uploadBandwidthMbps": 500,
        "virtual": true,
        "children": {
          "PoP_5": {
            "downloadBandwidthMbps": 200,
            "uploadBandwidthMbps": 200,
            "children": {
              "AP_9": { "downloadBandwidthMbps": 120, "uploadBandwidthMbps": 120 }
            }
          }
        }
      }
    }
  },
  "Site_2": { "downloadBandwidthMbps": 500, "uploadBandwidthMbps": 500 }
}"#;

    #[test]
    fn the_documented_tree_loads_in_file_order_with_lines() {
        let mut problems = Vec::new();
        let set = import("network.json", EXAMPLE, &mut problems);
        assert_eq!(problems, vec![]);
        let names: Vec<&str> = set.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            ["Site_1", "AP_A", "Site_3", "PoP_5", "AP_9", "Site_2"]
        );
        let parents: Vec<Option<usize>> = set.nodes.iter().map(|n| n.parent).collect();
        assert_eq!(parents, [None, Some(0), Some(0), Some(2), Some(3), None]);
        assert!(set.nodes[2].is_virtual);
        assert_eq!(set.nodes[1].upload_bps, Some(500_500_000));
        let lines: Vec<usize> = set.nodes.iter().map(|n| n.origin.line).collect();
        assert_eq!(lines, [2, 7, 11, 16, 20, 27]);
    }

    #[test]
    fn flat_and_broken_files() {
        let mut problems = Vec::new();
        assert!(import("n.json", "{}", &mut problems).nodes.is_empty());
        assert!(problems.is_empty());
        import("n.json", "{\n  \"a\": {\n", &mut problems);
        assert!(
            problems[0]
                .to_string()
                .starts_with("n.json:3: error: not valid JSON"),
            "{problems:?}"
        );
        let mut problems = Vec::new();
        import("n.json", "[1]", &mut problems);
        assert!(problems[0].message.contains("must be an object"));
        let mut problems = Vec::new();
        let set = import(
            "n.json",
            "{\"a\": {\"downloadBandwidthMbps\": \"x\", \"uploadBandwidthMbps\": -1, \"virtual\": 3, \"children\": []}, \"b\": 7}",
            &mut problems,
        );
        assert_eq!(set.nodes.len(), 1);
        assert_eq!(problems.len(), 6, "{problems:?}");
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let mut text = String::new();
        for i in 0..40 {
            text.push_str(&format!("{{\"n{i}\": {{\"children\": "));
        }
        text.push_str("{}");
        for _ in 0..40 {
            text.push_str("}}");
        }
        let mut problems = Vec::new();
        import("deep.json", &text, &mut problems);
        assert!(problems.iter().any(|p| p.message.contains("nested deeper")));
    }
}
