//! Shared helpers for the benchmark harnesses.
