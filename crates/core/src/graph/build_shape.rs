//! Builders for build_shape ops (being written).
