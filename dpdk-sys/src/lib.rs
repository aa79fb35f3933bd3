//! TODO: bindings
