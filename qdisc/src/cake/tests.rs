//! Unit tests of the CAKE instance: lookups and host fairness, the state machine, the
//! shaper and overflow handling, and the quirks the module docs list.

use super::*;
use crate::testing::{udp_meta, TestPacket};

fn cake(config: CakeConfig) -> Cake<TestPacket> {
    Cake::new(&config).unwrap()
}

#[test]
fn a_default_instance_preallocates_under_two_mebibytes() {
    let c = cake(CakeConfig::default());
    let bytes = c.preallocated_bytes();
    assert!(bytes < 2 << 20, "{bytes} bytes");
    assert_eq!(std::mem::size_of::<Flow>(), 64);
}
