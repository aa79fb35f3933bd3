//! TODO: port
