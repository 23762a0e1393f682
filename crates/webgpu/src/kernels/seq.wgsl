// Sequence and convolution kernels (filled in by ops/seq.rs variants).
