//! LibreQoS's `ShapedDevices.csv`: one row per device, the circuit's columns repeated on each
//! device row of the circuit (rows sharing a `Circuit ID` form one circuit). Columns are found
//! by their header name, so their order and extra columns do not matter: `Circuit ID`,
//! `Circuit Name`, `Device ID`, `Device Name`, `Parent Node`, `MAC`, `IPv4`, `IPv6`,
//! `Download Min Mbps`, `Upload Min Mbps`, `Download Max Mbps`, `Upload Max Mbps`, `Comment`,
//! and the optional `sqm` (`cake diffserv4`, `fq_codel`, `none`, or `DOWN/UP`). An address
//! cell holds several addresses or prefixes separated by commas (quoted in the CSV). Lines
//! starting with `#` are comments. Rates are Mbps and may have decimals.

use std::sync::Arc;

use crate::model::{mbps_to_bps, parse_mac, Circuit, CircuitSet, Device, Names, Origin, Plan, Sqm};
use crate::prefix::Prefix;
use crate::problem::Problem;

/// The columns, by the header names LibreQoS writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    CircuitId,
    CircuitName,
    DeviceId,
    DeviceName,
    ParentNode,
    Mac,
    Ipv4,
    Ipv6,
    DownloadMin,
    UploadMin,
    DownloadMax,
    UploadMax,
    Comment,
    Sqm,
}

const COLUMNS: [(Column, &str, bool); 14] = [
    (Column::CircuitId, "circuit id", true),
    (Column::CircuitName, "circuit name", false),
    (Column::DeviceId, "device id", false),
    (Column::DeviceName, "device name", false),
    (Column::ParentNode, "parent node", false),
    (Column::Mac, "mac", false),
    (Column::Ipv4, "ipv4", true),
    (Column::Ipv6, "ipv6", true),
    (Column::DownloadMin, "download min mbps", false),
    (Column::UploadMin, "upload min mbps", false),
    (Column::DownloadMax, "download max mbps", true),
    (Column::UploadMax, "upload max mbps", true),
    (Column::Comment, "comment", false),
    (Column::Sqm, "sqm", false),
];

/// Reads `text` (the contents of `file`) into circuits and devices. Problems go to
/// `problems`; a bad row is skipped, the others still load.
pub fn import(file: &str, text: &str, problems: &mut Vec<Problem>) -> CircuitSet {
    let file: Arc<str> = Arc::from(file);
    let mut set = CircuitSet::default();
    let mut names = Names::default();
    let mut reader = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .flexible(true)
        .trim(csv::Trim::All)
        .has_headers(false)
        .from_reader(text.as_bytes());
    let mut records = reader.records();
    // The header: the first record that is not a comment.
    let header = match records.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => {
            problems.push(Problem::error(
                &Origin::new(&file, line_of(&e)),
                e.to_string(),
            ));
            return set;
        }
        None => {
            problems.push(Problem::error(
                &Origin::new(&file, 0),
                "the file is empty: a ShapedDevices.csv starts with a header row \
                 (Circuit ID, Circuit Name, Device ID, …)",
            ));
            return set;
        }
    };
    let header_origin = Origin::new(&file, header.position().map_or(1, |p| p.line() as usize));
    let mut index = [None; COLUMNS.len()];
    for (i, name) in header.iter().enumerate() {
        let name = name
            .trim_start_matches('\u{feff}')
            .trim()
            .to_ascii_lowercase();
        if let Some(c) = COLUMNS.iter().position(|(_, n, _)| *n == name) {
            index[c].get_or_insert(i);
        }
    }
    let missing: Vec<&str> = COLUMNS
        .iter()
        .zip(&index)
        .filter(|((_, _, required), i)| *required && i.is_none())
        .map(|((_, n, _), _)| *n)
        .collect();
    if !missing.is_empty() {
        problems.push(Problem::error(
            &header_origin,
            format!(
                "the header has no column {}: is this a LibreQoS ShapedDevices.csv?",
                missing.join(", ")
            ),
        ));
        return set;
    }
    for record in records {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                problems.push(Problem::error(
                    &Origin::new(&file, line_of(&e)),
                    e.to_string(),
                ));
                continue;
            }
        };
        let origin = Origin::new(&file, record.position().map_or(0, |p| p.line() as usize));
        if record.iter().all(str::is_empty) {
            continue;
        }
        let cell = |c: Column| -> &str {
            let at = COLUMNS.iter().position(|(col, _, _)| *col == c);
            at.and_then(|a| index[a])
                .and_then(|i| record.get(i))
                .unwrap_or("")
        };
        if let Err(message) = row(&mut set, &mut names, &origin, &cell) {
            problems.push(Problem::error(&origin, message));
        }
    }
    set
}

fn line_of(e: &csv::Error) -> usize {
    e.position().map_or(0, |p| p.line() as usize)
}

fn optional_rate(text: &str, what: &str) -> Result<Option<u64>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    mbps_to_bps(text)
        .map(Some)
        .map_err(|e| format!("{what}: {e}"))
}

fn rate(text: &str, what: &str) -> Result<u64, String> {
    optional_rate(text, what)?.ok_or_else(|| format!("{what} is empty: every circuit needs one"))
}

/// Addresses of one cell: comma or space separated.
pub(crate) fn addresses(text: &str, column: &str) -> Result<Vec<Prefix>, String> {
    text.split([',', ' ', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<Prefix>().map_err(|e| format!("{column}: {e}")))
        .collect()
}

fn row<'r>(
    set: &mut CircuitSet,
    names: &mut Names,
    origin: &Origin,
    cell: &dyn Fn(Column) -> &'r str,
) -> Result<(), String> {
    let id = cell(Column::CircuitId);
    if id.is_empty() {
        return Err("Circuit ID is empty: every row needs the ID of its circuit".into());
    }
    let plan = |min: Column, max: Column, dir: &str| -> Result<Plan, String> {
        Ok(Plan {
            max_bps: rate(cell(max), &format!("{dir} Max Mbps"))?,
            min_bps: optional_rate(cell(min), &format!("{dir} Min Mbps"))?,
        })
    };
    let download = plan(Column::DownloadMin, Column::DownloadMax, "Download")?;
    let upload = plan(Column::UploadMin, Column::UploadMax, "Upload")?;
    let parent = Some(cell(Column::ParentNode).to_string()).filter(|p| !p.is_empty());
    let sqm = Sqm::parse(cell(Column::Sqm))?;
    let mut prefixes = addresses(cell(Column::Ipv4), "IPv4")?;
    let v6 = addresses(cell(Column::Ipv6), "IPv6")?;
    if prefixes.iter().any(|p| p.family != crate::Family::V4) {
        return Err("IPv4: an IPv6 address in the IPv4 column".into());
    }
    if v6.iter().any(|p| p.family != crate::Family::V6) {
        return Err("IPv6: an IPv4 address in the IPv6 column".into());
    }
    prefixes.extend(v6);
    let mac = match cell(Column::Mac) {
        "" => None,
        m => Some(parse_mac(m)?),
    };
    let circuit = match names.circuit(id) {
        Some(c) => {
            let have = &set.circuits[c];
            let mut differs = Vec::new();
            if have.download != download || have.upload != upload {
                differs.push("rates");
            }
            if have.parent != parent {
                differs.push("Parent Node");
            }
            if have.sqm != sqm {
                differs.push("sqm");
            }
            if !differs.is_empty() {
                return Err(format!(
                    "circuit `{id}` was defined at {} with other {}: every row of a circuit \
                     must repeat the same values",
                    have.origin,
                    differs.join(" and ")
                ));
            }
            c
        }
        None => {
            set.circuits.push(Circuit {
                id: id.to_string(),
                name: cell(Column::CircuitName).to_string(),
                download,
                upload,
                parent,
                sqm,
                devices: Vec::new(),
                origin: origin.clone(),
            });
            names.add_circuit(id, set.circuits.len() - 1);
            set.circuits.len() - 1
        }
    };
    set.circuits[circuit].devices.push(set.devices.len());
    set.devices.push(Device {
        id: cell(Column::DeviceId).to_string(),
        name: cell(Column::DeviceName).to_string(),
        mac,
        prefixes,
        comment: cell(Column::Comment).to_string(),
        circuit,
        origin: origin.clone(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SqmChoice;

    const EXAMPLE: &str = "\
# A comment line, as in LibreQoS's example
Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment,sqm
1,\"968 Circle St., Gurnee, IL 60031\",1,Device 1,AP_A,,\"100.64.0.1, 100.64.0.14\",,25,5,155,20,,
2,\"31 Marconi Street, Lake In The Hills, IL 60156\",2,Device 2,AP_A,,100.64.0.2,,25,5,105,18,,cake diffserv4
3,\"255 NW. Newport Ave., Jamestown, NY 14701\",3,Device 3,AP_9,,100.64.0.3,,25,5,105,18,,none/cake
3,\"255 NW. Newport Ave., Jamestown, NY 14701\",4,Device 4,AP_9,02:00:00:00:00:04,100.64.0.4/30,\"2001:db8::/64, 2001:db8:1::/56\",25,5,105,18,,none/cake
";

    #[test]
    fn the_documented_example_loads_with_shared_circuit_ids() {
        let mut problems = Vec::new();
        let set = import("ShapedDevices.csv", EXAMPLE, &mut problems);
        assert_eq!(problems, vec![]);
        assert_eq!(set.circuits.len(), 3);
        assert_eq!(set.devices.len(), 4);
        let c1 = &set.circuits[0];
        assert_eq!(c1.name, "968 Circle St., Gurnee, IL 60031");
        assert_eq!(c1.download.max_bps, 155_000_000);
        assert_eq!(c1.upload.min_bps, Some(5_000_000));
        assert_eq!(c1.parent.as_deref(), Some("AP_A"));
        assert_eq!(c1.origin.to_string(), "ShapedDevices.csv:3");
        assert_eq!(set.devices[0].prefixes.len(), 2);
        assert_eq!(
            set.circuits[1].sqm.download,
            SqmChoice::Cake("diffserv4".into())
        );
        let c3 = &set.circuits[2];
        assert_eq!(c3.devices, vec![2, 3]);
        assert_eq!(
            (c3.sqm.download.clone(), c3.sqm.upload.clone()),
            (SqmChoice::None, SqmChoice::Cake(String::new()))
        );
        let d4 = &set.devices[3];
        assert_eq!(d4.mac, Some([2, 0, 0, 0, 0, 4]));
        assert_eq!(d4.prefixes.len(), 3);
        assert_eq!(d4.origin.line, 6);
    }

    #[test]
    fn bad_rows_are_named_by_line_and_the_rest_still_loads() {
        let text = "\
Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment
1,a,1,d,,,100.64.0.1,,,,fast,20,
2,b,2,d,,zz,100.64.0.2,,,,10,20,
3,c,3,d,,,100.64.0.300,,,,10,20,
4,d,4,d,,,100.64.0.4,,,,10,20,
4,d,5,d,,,100.64.0.5,,,,11,20,
,e,6,d,,,100.64.0.6,,,,10,20,
7,f,7,d,,,2001:db8::1,,,,10,20,
8,g,8,d,,,100.64.0.8,,,,10,
";
        let mut problems = Vec::new();
        let set = import("sd.csv", text, &mut problems);
        let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert!(
            lines[0].starts_with("sd.csv:2: error: Download Max Mbps: `fast`"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("sd.csv:3: error: `zz` is not a MAC"),
            "{lines:?}"
        );
        assert!(lines[2].contains("sd.csv:4") && lines[2].contains("100.64.0.300"));
        assert!(lines[3].contains("sd.csv:6") && lines[3].contains("defined at sd.csv:5"));
        assert!(lines[4].contains("sd.csv:7") && lines[4].contains("Circuit ID is empty"));
        assert!(lines[5].contains("sd.csv:8") && lines[5].contains("IPv6 address in the IPv4"));
        assert!(lines[6].contains("sd.csv:9") && lines[6].contains("Upload Max Mbps is empty"));
        assert_eq!(problems.len(), 7);
        assert_eq!(set.circuits.len(), 1, "only circuit 4 loads");
    }

    #[test]
    fn a_file_that_is_not_shaped_devices_says_so() {
        let mut problems = Vec::new();
        import("x.csv", "a,b,c\n1,2,3\n", &mut problems);
        assert!(
            problems[0].message.contains("no column circuit id"),
            "{problems:?}"
        );
        let mut problems = Vec::new();
        import("x.csv", "# only a comment\n", &mut problems);
        assert!(problems[0].message.contains("empty"));
    }
}
