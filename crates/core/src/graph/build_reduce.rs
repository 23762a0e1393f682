//! Builders for build_reduce ops (being written).
