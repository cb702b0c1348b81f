//! The scenarios live in `tests/`; this crate exists to own them.
