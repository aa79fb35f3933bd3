//! TODO: engine
