//! TODO: control
