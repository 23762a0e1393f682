//! Builders for build_seq ops (being written).
