//! One CAKE instance (sch_cake): tins, flows, DRR++, COBALT and the time-based shaper.

mod config;

pub use config::{AckFilterMode, AtmMode, CakeConfig, DiffservMode, FlowMode};
