//! [`GgufStream`]: a file fed in chunks of every size gives the header [`GgufFile::from_bytes`]
//! gives and each tensor's bytes exactly once, in order; a corrupt file gives the same error as
//! the whole-file reader; streams that end early or run long are clear errors.

use std::collections::HashMap;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wgllm_core::DType;
use wgllm_gguf::{
    Array, GgufError, GgufFile, GgufStream, GgufWriter, StreamEvent, Value, MAX_STREAMED_HEADER,
};

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A file with a vocabulary-sized string array (an item that spans many small chunks) and
/// tensors of several dtypes, sizes not multiples of 4 among them.
fn file(alignment: Option<u32>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.add_metadata("general.alignment", Value::U32(a)).unwrap();
    }
    let tokens = (0..3000).map(|i| format!("tok{i}")).collect();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .unwrap()
        .add_metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .unwrap()
        .add_metadata("a.f32", Value::Array(Array::F32(vec![0.5; 100])))
        .unwrap()
        .add_metadata("a.u32", Value::U32(7))
        .unwrap();
    let tensors: [(&str, DType, &[u64], usize); 5] = [
        ("token_embd.weight", DType::F32, &[64, 30], 64 * 30 * 4),
        ("norm", DType::F16, &[5], 10),
        ("blk.0.ffn_up.weight", DType::Q4_0, &[64, 3], 108),
        ("blk.0.ffn_down.weight", DType::Q4_K, &[256, 1, 2], 288),
        ("odd", DType::I8, &[7], 7),
    ];
    for (i, (name, dtype, shape, n)) in tensors.into_iter().enumerate() {
        w.add_tensor(name, dtype, shape, pattern(n, i as u8))
            .unwrap();
    }
    w.to_vec()
}

/// What a stream handed on.
#[derive(Default)]
struct Seen {
    /// The header's data offset when it came, and how many data pieces came before it.
    header_at: Option<(u64, usize)>,
    pieces: usize,
    /// Per tensor, its bytes assembled from the pieces (each piece must continue the last).
    data: HashMap<String, Vec<u8>>,
}

impl Seen {
    fn event(&mut self, e: StreamEvent<'_>) -> Result<(), GgufError> {
        match e {
            StreamEvent::Header(f) => {
                assert!(self.header_at.is_none(), "the header comes once");
                assert!(!f.holds_tensor_data());
                self.header_at = Some((f.data_offset(), self.pieces));
            }
            StreamEvent::Data {
                tensor,
                offset,
                bytes,
            } => {
                assert!(!bytes.is_empty(), "no empty pieces");
                let got = self.data.entry(tensor.name().to_owned()).or_default();
                assert_eq!(
                    got.len() as u64,
                    offset,
                    "pieces of {} in order",
                    tensor.name()
                );
                got.extend_from_slice(bytes);
                assert!(got.len() as u64 <= tensor.size());
                self.pieces += 1;
            }
        }
        Ok(())
    }
}

/// Feeds `bytes` in chunks whose sizes `next_size` picks; returns the file and what came out.
fn stream(
    bytes: &[u8],
    total: Option<u64>,
    mut next_size: impl FnMut() -> usize,
) -> (Result<GgufFile, GgufError>, Seen) {
    let mut s = GgufStream::new(total);
    let mut seen = Seen::default();
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + next_size().max(1)).min(bytes.len());
        if let Err(e) = s.feed(&bytes[at..end], |e| seen.event(e)) {
            return (Err(e), seen);
        }
        at = end;
        assert_eq!(s.fed(), at as u64);
    }
    let r = s.finish(|e| seen.event(e));
    (r, seen)
}

#[track_caller]
fn check_same(bytes: &[u8], streamed: &GgufFile, seen: &Seen) {
    let whole = GgufFile::from_bytes(Bytes::copy_from_slice(bytes)).unwrap();
    assert_eq!(streamed.version(), whole.version());
    assert_eq!(streamed.metadata(), whole.metadata());
    assert_eq!(streamed.tensors(), whole.tensors());
    assert_eq!(streamed.alignment(), whole.alignment());
    assert_eq!(streamed.data_offset(), whole.data_offset());
    assert_eq!(streamed.file_len(), whole.file_len());
    assert_eq!(seen.header_at, Some((whole.data_offset(), 0)));
    assert_eq!(seen.data.len(), whole.tensors().len());
    for t in whole.tensors() {
        assert_eq!(
            seen.data[t.name()],
            whole.tensor_data(t).unwrap(),
            "{}",
            t.name()
        );
        let e = streamed.tensor_data(t).unwrap_err();
        assert!(matches!(e, GgufError::NotHeld { .. }), "{e}");
    }
    assert!(!streamed.holds_tensor_data());
}

#[test]
fn any_chunking_gives_the_whole_file_header_and_every_tensor_byte_once() {
    let mut rng = StdRng::seed_from_u64(8);
    for alignment in [None, Some(64), Some(1)] {
        let bytes = file(alignment);
        let len = bytes.len();
        for total in [Some(len as u64), None] {
            for size in [1, 2, 3, 7, 13, 31, 97, 1021, 4099, len] {
                let (r, seen) = stream(&bytes, total, || size);
                check_same(&bytes, &r.unwrap(), &seen);
            }
            let (r, seen) = stream(&bytes, total, || rng.random_range(1..600));
            check_same(&bytes, &r.unwrap(), &seen);
        }
    }
}

#[test]
fn the_header_is_reported_once_its_bytes_are_in() {
    // Alignment 1: the data section starts where the header ends.
    let bytes = file(Some(1));
    let whole = GgufFile::from_bytes(Bytes::copy_from_slice(&bytes)).unwrap();
    let mut s = GgufStream::new(Some(bytes.len() as u64));
    let header_end = whole.data_offset() as usize;
    s.feed::<GgufError>(&bytes[..header_end - 1], |_| Ok(()))
        .unwrap();
    assert!(s.header().is_none(), "a byte of the header is missing");
    let mut events = Vec::new();
    s.feed::<GgufError>(&bytes[header_end - 1..], |e| {
        events.push(match e {
            StreamEvent::Header(f) => format!("header {}", f.tensors().len()),
            StreamEvent::Data { tensor, .. } => tensor.name().to_owned(),
        });
        Ok(())
    })
    .unwrap();
    assert_eq!(events[0], "header 5");
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(s.header().unwrap().tensors(), whole.tensors());
}

#[test]
fn corrupt_files_give_the_whole_file_readers_error() {
    let good = file(None);
    let infos_end = GgufFile::from_bytes(Bytes::copy_from_slice(&good))
        .unwrap()
        .data_offset() as usize;
    let mut rng = StdRng::seed_from_u64(0x5354_524d);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..1500 {
        let mut b = good.clone();
        // Corrupt the header (the first 40 bytes and the tensor infos at its end) more often
        // than the token strings.
        for _ in 0..rng.random_range(1..=3) {
            let at = match rng.random_range(0..3) {
                0 => rng.random_range(0..40),
                1 => rng.random_range(infos_end - 320..infos_end),
                _ => rng.random_range(0..b.len()),
            };
            b[at] ^= rng.random_range(1..=255u8);
        }
        if rng.random_bool(0.2) {
            b.truncate(rng.random_range(0..b.len()));
        }
        let whole = GgufFile::from_bytes(Bytes::copy_from_slice(&b)).map(|_| ());
        let sizes = [1, rng.random_range(1..64), rng.random_range(64..5000)];
        let size = sizes[rng.random_range(0..3)];
        let (known, _) = stream(&b, Some(b.len() as u64), || size);
        match (&whole, known) {
            (Ok(()), Ok(_)) => ok += 1,
            (Err(w), Err(s)) => {
                let (w, s) = (w.to_string(), s.to_string());
                // A stream knows a bad magic from its first wrong byte, and shows the bytes
                // it has.
                if !(w.starts_with("bad magic") && s.starts_with("bad magic")) {
                    assert_eq!(w, s, "chunks of {size}");
                }
                err += 1;
            }
            (w, s) => panic!("whole file {w:?}, streamed {:?}", s.map(|_| ())),
        }
        // Without the length the checks that need it wait for the stream's end; the verdict
        // is the same.
        let (unknown, _) = stream(&b, None, || size);
        assert_eq!(whole.is_ok(), unknown.is_ok(), "{unknown:?}");
    }
    assert!(
        ok > 0 && err > 0,
        "both outcomes occur: {ok} ok, {err} errors"
    );
}

#[test]
fn streams_ending_early_or_running_long_are_errors() {
    // Alignment 1: the data section starts where the header ends.
    let bytes = file(Some(1));
    let whole = GgufFile::from_bytes(Bytes::copy_from_slice(&bytes)).unwrap();
    let len = bytes.len() as u64;
    let header_end = whole.data_offset() as usize;
    let err = |b: &[u8], total: Option<u64>| stream(b, total, || 100).0.unwrap_err().to_string();

    // Ends in the header: the parser's own message, with or without the length.
    let e = err(&bytes[..header_end - 20], None);
    assert!(e.starts_with("truncated file: tensor"), "{e}");
    let e = err(&bytes[..200], Some(len));
    assert_eq!(e, format!("the stream gave 200 bytes, but announced {len}"));

    // Ends in a tensor's data: which tensor, where, and how long the stream was.
    let last = whole.tensors().iter().max_by_key(|t| t.offset()).unwrap();
    let cut = len - 3;
    let e = err(&bytes[..cut as usize], None);
    assert!(
        e.contains(&format!("tensor \"{}\"", last.name()))
            && e.contains(&format!("reaches past the end of the file ({cut} bytes)")),
        "{e}"
    );
    let e = err(&bytes[..cut as usize], Some(len));
    assert_eq!(
        e,
        format!("the stream gave {cut} bytes, but announced {len}")
    );

    // Announced lengths: shorter (refused as soon as the header shows a tensor past it, or as
    // soon as the stream passes it) and longer.
    let e = err(&bytes, Some(len - 3));
    assert!(e.contains("reaches past the end of the file"), "{e}");
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 10]);
    let e = err(&longer, Some(len));
    assert_eq!(
        e,
        format!(
            "the stream gave {} bytes so far, but announced {len}",
            len + 10
        )
    );
    let e = err(&bytes, Some(len + 10));
    assert_eq!(
        e,
        format!("the stream gave {len} bytes, but announced {}", len + 10)
    );

    // Not a GGUF file: known from the first bytes.
    let mut s = GgufStream::new(None);
    let e = s.feed::<GgufError>(b"PK", |_| Ok(())).unwrap_err();
    assert!(e.to_string().starts_with("bad magic"), "{e}");
    let e = s.feed::<GgufError>(b"GGUF", |_| Ok(())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the GGUF stream already failed; start a new one"
    );
}

#[test]
fn a_sink_error_stops_the_stream() {
    let bytes = file(None);
    let mut s = GgufStream::new(None);
    let e = s
        .feed(&bytes, |e| match e {
            StreamEvent::Data { tensor, .. } if tensor.name() == "norm" => {
                Err(GgufError::InvalidWrite {
                    what: "device full".into(),
                })
            }
            _ => Ok(()),
        })
        .unwrap_err();
    assert!(e.to_string().contains("device full"), "{e}");
    assert!(matches!(
        s.finish::<GgufError>(|_| Ok(())),
        Err(GgufError::StreamFailed)
    ));
}

#[test]
fn a_header_too_large_to_buffer_is_refused_before_it_is_buffered() {
    // One metadata key whose string value claims 1 GiB: refused after its 8 length bytes.
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&8u32.to_le_bytes());
    b.extend_from_slice(&(1u64 << 30).to_le_bytes());
    let mut s = GgufStream::new(None);
    let e = s.feed::<GgufError>(&b, |_| Ok(())).unwrap_err();
    assert!(
        matches!(e, GgufError::HeaderTooLarge { max, .. } if max == MAX_STREAMED_HEADER),
        "{e}"
    );
    // With the length announced, the same string is implausible at once.
    let mut s = GgufStream::new(Some(1 << 20));
    let e = s.feed::<GgufError>(&b, |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("cannot fit"), "{e}");
}
