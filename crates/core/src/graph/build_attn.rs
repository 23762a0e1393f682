//! Builders for build_attn ops (being written).
