//! Per-task memory measurement (being written).
