//! The `runner` engine.
