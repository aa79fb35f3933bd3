//! cake_mq: per-TX-queue shapers sharing one global rate through atomics (Linux 7.0's
//! `cake_mq`, plus a work-conserving split), with a lockless intake and enqueue bypass.
