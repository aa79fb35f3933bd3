//! hugepage-setup binary.
fn main() {}
