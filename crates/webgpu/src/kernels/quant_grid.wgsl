// Codebook decoders of the IQ formats.
