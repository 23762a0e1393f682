//! Builders for build_nn ops (being written).
