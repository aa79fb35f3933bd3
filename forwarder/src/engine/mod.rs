//! The worker loops: each worker polls its receive queues in bursts, parses and classifies
//! every packet, queues it into the TX queue's shaper and transmits what the shapers release.

pub mod clock;
