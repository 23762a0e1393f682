//! Malformed, truncated and hostile files: each must be an `Err` whose message names the problem,
//! never a panic or a huge allocation.
//!
//! Files are written with [`GgufWriter`], then corrupted at byte positions found by searching for
//! the names the writer laid down; a few cases the writer refuses to produce are built by hand.

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wgllm_core::DType;
use wgllm_gguf::{Array, GgufFile, GgufWriter, Value};

/// Parses `bytes`, touching every tensor's data when it parses.
fn parse(bytes: Vec<u8>) -> Result<GgufFile, String> {
    let file = GgufFile::from_bytes(Bytes::from(bytes)).map_err(|e| e.to_string())?;
    for t in file.tensors() {
        let data = file.tensor_data(t).map_err(|e| e.to_string())?;
        assert_eq!(data.len() as u64, t.size());
    }
    Ok(file)
}

#[track_caller]
fn expect_err(bytes: Vec<u8>, fragment: &str) {
    match parse(bytes) {
        Ok(_) => panic!("parsed, expected an error containing {fragment:?}"),
        Err(e) => assert!(e.contains(fragment), "{e:?} does not contain {fragment:?}"),
    }
}

/// A small valid file: three tensors, the last ending on an alignment boundary (so every strict
/// prefix of the file is missing bytes), and metadata of several kinds.
fn base() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .unwrap()
        .add_metadata("a.count", Value::U32(7))
        .unwrap()
        .add_metadata("a.flag", Value::Bool(true))
        .unwrap()
        .add_metadata("dup.aaaa", Value::U8(1))
        .unwrap()
        .add_metadata("dup.bbbb", Value::U8(2))
        .unwrap()
        .add_metadata(
            "tokens",
            Value::Array(Array::String(vec!["a".into(), "bc".into(), "".into()])),
        )
        .unwrap()
        .add_tensor("t0", DType::F32, &[8], vec![1u8; 32])
        .unwrap()
        .add_tensor("t1", DType::Q4_0, &[32, 2], vec![2u8; 36])
        .unwrap()
        .add_tensor("t2", DType::F32, &[8], vec![3u8; 32])
        .unwrap();
    w.to_vec()
}

fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the file"))
}

/// Position right after metadata key `key` (where its u32 value type starts).
fn after_key(bytes: &[u8], key: &str) -> usize {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    find(bytes, &needle) + needle.len()
}

/// Positions of a tensor info's fields: (n_dims, dims, type, offset).
fn tensor_fields(bytes: &[u8], name: &str) -> (usize, usize, usize, usize) {
    let n_dims_at = after_key(bytes, name);
    let n = u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
    let dims_at = n_dims_at + 4;
    let type_at = dims_at + 8 * n;
    (n_dims_at, dims_at, type_at, type_at + 4)
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// A version 3 file header with the given counts and raw body.
fn raw(tensor_count: u64, kv_count: u64, body: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&tensor_count.to_le_bytes());
    out.extend_from_slice(&kv_count.to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn gguf_str(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

#[test]
fn base_file_is_valid() {
    let f = parse(base()).unwrap();
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.data_offset() + 32 + 64 + 32, f.file_len());
}

#[test]
fn header_errors() {
    expect_err(Vec::new(), "truncated file: magic at offset 0");
    expect_err(b"GG".to_vec(), "truncated file: magic");
    expect_err(b"PK\x03".to_vec(), "bad magic");
    let mut b = base();
    b[..4].copy_from_slice(b"GGML");
    expect_err(b, "bad magic [47, 47, 4d, 4c] at offset 0: not a GGUF file");
    for (version, fragment) in [
        (1, "unsupported GGUF version 1: GGUF v1 used 32-bit counts"),
        (0, "unsupported GGUF version 0: only versions 2 and 3"),
        (4, "unsupported GGUF version 4"),
        (3u32.swap_bytes(), "big-endian"),
    ] {
        let mut b = base();
        put_u32(&mut b, 4, version);
        expect_err(b, fragment);
    }
    expect_err(
        base()[..10].to_vec(),
        "truncated file: tensor count at offset 8 needs 8 bytes, only 2 left",
    );
}

#[test]
fn absurd_counts_are_rejected_before_allocating() {
    let mut b = base();
    put_u64(&mut b, 8, u64::MAX);
    expect_err(
        b,
        "tensor count 18446744073709551615 at offset 8 cannot fit",
    );
    let mut b = base();
    put_u64(&mut b, 16, 1 << 60);
    expect_err(
        b,
        "metadata count 1152921504606846976 at offset 16 cannot fit",
    );
    // Each count fits the bytes left on its own, but not both together.
    let mut b = base();
    let left = b.len() as u64 - 24;
    put_u64(&mut b, 8, left / 32);
    put_u64(&mut b, 16, left / 13);
    expect_err(b, "metadata and tensor counts");
    // A key length far past the end.
    let mut b = base();
    put_u64(&mut b, 24, u64::MAX / 2);
    expect_err(
        b,
        "string length 9223372036854775807 at offset 24 cannot fit",
    );
    // An array length far past the end.
    let mut b = base();
    let len_at = after_key(&b, "tokens") + 4 + 4;
    put_u64(&mut b, len_at, 1 << 40);
    expect_err(b, "metadata key \"tokens\": array length 1099511627776");
    // A string inside the array longer than what is left.
    let mut b = base();
    let first = after_key(&b, "tokens") + 16;
    put_u64(&mut b, first, 1 << 20);
    expect_err(b, "metadata key \"tokens\": string length 1048576");
}

#[test]
fn metadata_errors() {
    let mut b = base();
    let at = after_key(&b, "dup.bbbb");
    b[at - 4..at].copy_from_slice(b"aaaa");
    expect_err(b, "duplicate metadata key \"dup.aaaa\"");

    let mut b = base();
    let at = after_key(&b, "dup.aaaa");
    b[at - 1] = 0xff;
    expect_err(
        b,
        &format!("metadata key at offset {} is not valid UTF-8", at - 16),
    );

    let mut b = base();
    let at = after_key(&b, "a.count");
    put_u32(&mut b, at, 13);
    expect_err(
        b,
        &format!("metadata key \"a.count\": unknown metadata value type 13 at offset {at}"),
    );

    let mut b = base();
    let at = after_key(&b, "a.flag");
    b[at + 4] = 2;
    expect_err(b, "metadata key \"a.flag\": invalid bool byte 2");

    let mut b = base();
    let at = after_key(&b, "tokens");
    put_u32(&mut b, at + 4, 99);
    expect_err(b, "metadata key \"tokens\": unknown metadata value type 99");

    let mut b = base();
    let at = after_key(&b, "tokens");
    b[at + 4 + 4 + 8 + 8] = 0xc3; // "a" becomes a lone UTF-8 lead byte
    expect_err(b, "metadata key \"tokens\": array string at offset");

    let long_key = gguf_str(&vec![b'k'; 65_536]);
    let mut body = long_key;
    body.extend_from_slice(&0u32.to_le_bytes());
    body.push(0);
    expect_err(raw(0, 1, &body), "65536 bytes long, at most 65535 allowed");
}

#[test]
fn array_nesting_is_limited() {
    let nested = |depth: usize| {
        let mut body = gguf_str(b"deep");
        body.extend_from_slice(&9u32.to_le_bytes());
        for _ in 1..depth {
            body.extend_from_slice(&9u32.to_le_bytes());
            body.extend_from_slice(&1u64.to_le_bytes());
        }
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&0u64.to_le_bytes());
        raw(0, 1, &body)
    };
    assert!(parse(nested(8)).is_ok(), "8 levels are allowed");
    expect_err(nested(9), "metadata key \"deep\": array at offset");
    expect_err(nested(9), "nested deeper than 8 levels");
    expect_err(nested(100_000), "nested deeper than 8 levels");
}

#[test]
fn alignment_errors() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", Value::U32(64)).unwrap();
    w.add_tensor("t", DType::F32, &[1], vec![0u8; 4]).unwrap();
    let good = w.to_vec();
    let at = after_key(&good, "general.alignment");
    for (v, fragment) in [
        (
            48,
            "invalid general.alignment: 48 is not a non-zero power of two",
        ),
        (0, "invalid general.alignment: 0 is not"),
    ] {
        let mut b = good.clone();
        put_u32(&mut b, at + 4, v);
        expect_err(b, fragment);
    }
    let mut b = good.clone();
    put_u32(&mut b, at, 6); // now an f32
    expect_err(b, "invalid general.alignment: f32");
}

/// A change made to a copy of [`base`].
type Corruption = Box<dyn Fn(&mut Vec<u8>)>;

#[test]
fn tensor_info_errors() {
    let cases: Vec<(Corruption, &str)> = vec![
        (
            Box::new(|b| {
                let at = after_key(b, "t2");
                b[at - 1] = b'0';
            }),
            "duplicate tensor name \"t0\"",
        ),
        (
            Box::new(|b| {
                let at = after_key(b, "t1");
                b[at - 2] = 0xff;
            }),
            "tensor name at offset",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").0;
                put_u32(b, at, 5)
            }),
            "tensor \"t1\" (info at offset",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").0;
                put_u32(b, at, 5)
            }),
            "5 dimensions, must be 1 to 4",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").0;
                put_u32(b, at, 0)
            }),
            "0 dimensions, must be 1 to 4",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").1 + 8;
                put_u64(b, at, 0)
            }),
            "dimension 1 is zero",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t0").2;
                put_u32(b, at, 4)
            }),
            "unknown ggml type id 4",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t0").2;
                put_u32(b, at, u32::MAX)
            }),
            "unknown ggml type id 4294967295",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").1;
                put_u64(b, at, 33)
            }),
            "ne[0] = 33 is not a multiple of the q4_0 block size 32",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").1 + 8;
                put_u64(b, at, u64::MAX / 2)
            }),
            "shape [32, 9223372036854775807] of q4_0 overflows u64",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").3;
                let v = get_u64(b, at) + 4;
                put_u64(b, at, v);
            }),
            "tensor \"t1\": data offset 36 is not a multiple of the alignment 32",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t2").3;
                let v = get_u64(b, at) + 32;
                put_u64(b, at, v);
            }),
            "tensor \"t2\": data at file bytes",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t2").3;
                put_u64(b, at, u64::MAX - 31)
            }),
            "reaches past the end of the file",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t1").3;
                put_u64(b, at, 0)
            }),
            "overlap",
        ),
        (
            Box::new(|b| {
                let at = tensor_fields(b, "t2").3;
                put_u64(b, at, 64)
            }),
            "tensors \"t1\" (data offsets 32..68) and \"t2\" (from 64) overlap",
        ),
    ];
    for (corrupt, fragment) in cases {
        let mut b = base();
        corrupt(&mut b);
        expect_err(b, fragment);
    }

    let mut info = gguf_str(&[b'x'; 65]);
    info.extend_from_slice(&1u32.to_le_bytes());
    info.extend_from_slice(&1u64.to_le_bytes());
    info.extend_from_slice(&0u32.to_le_bytes());
    info.extend_from_slice(&0u64.to_le_bytes());
    expect_err(
        raw(1, 0, &info),
        "name is 65 bytes long, at most 64 allowed",
    );
}

#[test]
fn every_truncation_is_an_error() {
    let b = base();
    for len in 0..b.len() {
        let e = match parse(b[..len].to_vec()) {
            Ok(_) => panic!("prefix of {len} bytes parsed"),
            Err(e) => e,
        };
        assert!(
            ["truncated file", "cannot fit", "past the end of the file"]
                .iter()
                .any(|f| e.contains(f)),
            "prefix of {len} bytes: {e}"
        );
    }
    assert!(parse(b).is_ok());
}

#[test]
fn random_corruption_never_panics() {
    let good = base();
    let mut rng = StdRng::seed_from_u64(0x6767_7566);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..20_000 {
        let mut b = good.clone();
        for _ in 0..rng.random_range(1..=4) {
            let at = rng.random_range(0..b.len());
            b[at] ^= rng.random_range(1..=255u8);
        }
        if rng.random_bool(0.1) {
            b.truncate(rng.random_range(0..b.len()));
        }
        match parse(b) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(!e.is_empty());
                err += 1;
            }
        }
    }
    assert!(
        ok > 0 && err > 0,
        "both outcomes occur: {ok} ok, {err} errors"
    );
}
