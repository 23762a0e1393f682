//! Write → read round trips through [`GgufWriter`] and [`GgufFile`], the typed getters, and the
//! writer's own refusals.

use bytes::Bytes;
use wgllm_core::DType;
use wgllm_gguf::{Array, GgufError, GgufFile, GgufWriter, Value, ValueType};

/// Metadata with every value type, including nested and empty arrays.
fn all_values() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::String("llama".into())),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1e-5)),
        ("t.bool", Value::Bool(true)),
        ("t.string.empty", Value::String(String::new())),
        ("t.string.unicode", Value::String("héllo ✓ 🦀".into())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(-0.125)),
        ("a.u8", Value::Array(Array::U8(vec![0, 1, 255]))),
        ("a.i8", Value::Array(Array::I8(vec![-128, 127]))),
        ("a.u16", Value::Array(Array::U16(vec![1, 65535]))),
        ("a.i16", Value::Array(Array::I16(vec![-1]))),
        ("a.u32", Value::Array(Array::U32(vec![7; 5]))),
        ("a.i32", Value::Array(Array::I32(vec![-7, 7]))),
        ("a.f32", Value::Array(Array::F32(vec![0.5, -1.5]))),
        ("a.bool", Value::Array(Array::Bool(vec![true, false]))),
        (
            "a.string",
            Value::Array(Array::String(vec!["<s>".into(), "".into(), "ĠThe".into()])),
        ),
        ("a.u64", Value::Array(Array::U64(vec![u64::MAX]))),
        ("a.i64", Value::Array(Array::I64(vec![i64::MIN, 0]))),
        ("a.f64", Value::Array(Array::F64(vec![1e300]))),
        ("a.empty", Value::Array(Array::U32(vec![]))),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::I16(vec![1, 2])]),
                Array::F32(vec![]),
            ])),
        ),
    ]
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Tensors of several dtypes and ranks: (name, dtype, shape, data).
fn tensors() -> Vec<(&'static str, DType, Vec<u64>, Vec<u8>)> {
    vec![
        (
            "token_embd.weight",
            DType::F32,
            vec![4, 3],
            f32_bytes(&(0..12).map(|i| i as f32 * 0.5).collect::<Vec<_>>()),
        ),
        (
            "blk.0.attn_norm.weight",
            DType::F16,
            vec![5],
            pattern(10, 1),
        ),
        (
            "blk.0.ffn_up.weight",
            DType::Q4_0,
            vec![64, 2],
            pattern(72, 2),
        ),
        (
            "blk.0.ffn_down.weight",
            DType::Q4_K,
            vec![256, 1, 2],
            pattern(288, 3),
        ),
        ("four_d", DType::BF16, vec![2, 1, 3, 2], pattern(24, 4)),
    ]
}

fn build(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.add_metadata("general.alignment", Value::U32(a)).unwrap();
    }
    for (k, v) in all_values() {
        w.add_metadata(k, v).unwrap();
    }
    for (name, dtype, shape, data) in tensors() {
        w.add_tensor(name, dtype, &shape, data).unwrap();
    }
    w
}

fn check(file: &GgufFile, alignment: u64) {
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), alignment);
    assert_eq!(file.data_offset() % alignment, 0);
    let skip = usize::from(alignment != 32);
    let got: Vec<(&str, &Value)> = file
        .metadata()
        .iter()
        .skip(skip)
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let want = all_values();
    let want: Vec<(&str, &Value)> = want.iter().map(|(k, v)| (*k, v)).collect();
    assert_eq!(got, want, "metadata and its order survive the round trip");
    assert_eq!(file.tensors().len(), tensors().len());
    for (t, (name, dtype, shape, data)) in file.tensors().iter().zip(tensors()) {
        assert_eq!(t.name(), name);
        assert_eq!(t.dtype(), dtype);
        assert_eq!(t.shape(), &shape[..]);
        assert_eq!(t.offset() % alignment, 0);
        assert_eq!(t.size(), data.len() as u64);
        assert_eq!(t.nelements(), shape.iter().product::<u64>());
        assert_eq!(file.tensor_data(t).unwrap(), &data[..]);
        assert_eq!(file.tensor(name), Some(t));
    }
}

#[test]
fn round_trip_in_memory_default_alignment() {
    let w = build(None);
    let bytes = w.to_vec();
    let mut streamed = Vec::new();
    w.write_to(&mut streamed).unwrap();
    assert_eq!(bytes, streamed, "to_vec and write_to agree");
    check(&GgufFile::from_bytes(Bytes::from(bytes)).unwrap(), 32);
}

#[test]
fn with_metadata_adds_and_replaces_keys_and_keeps_the_tensors() {
    let file = GgufFile::from_bytes(build(Some(64)).to_vec().into()).unwrap();
    let set = [
        ("t.u8".to_string(), Value::U8(7)),
        ("t.new".to_string(), Value::String("x".into())),
    ];
    let edited = GgufWriter::with_metadata(&file, set).unwrap().to_vec();
    let edited = GgufFile::from_bytes(edited.into()).unwrap();
    assert_eq!(edited.get("t.u8"), Some(&Value::U8(7)));
    assert_eq!(edited.get("t.new"), Some(&Value::String("x".into())));
    assert_eq!(edited.metadata().len(), file.metadata().len() + 1);
    assert_eq!(edited.alignment(), 64);
    assert_eq!(edited.tensors().len(), file.tensors().len());
    for t in file.tensors() {
        let e = edited.tensor(t.name()).unwrap();
        assert_eq!((e.dtype(), e.shape()), (t.dtype(), t.shape()));
        assert_eq!(edited.tensor_data(e).unwrap(), file.tensor_data(t).unwrap());
    }
}

#[test]
fn round_trip_with_custom_alignments() {
    for a in [1u32, 8, 64, 4096] {
        let file = GgufFile::from_bytes(build(Some(a)).to_vec().into()).unwrap();
        check(&file, a.into());
    }
}

#[test]
fn round_trip_through_a_mapped_file_shares_bytes() {
    let path = std::env::temp_dir().join(format!("wgllm-gguf-rt-{}.gguf", std::process::id()));
    build(None)
        .write_to(std::io::BufWriter::new(
            std::fs::File::create(&path).unwrap(),
        ))
        .unwrap();
    let file = GgufFile::open(&path).unwrap();
    check(&file, 32);
    let t = file.tensor("blk.0.ffn_up.weight").unwrap();
    let shared = file.tensor_bytes(t).unwrap();
    assert_eq!(
        shared.as_ptr(),
        file.tensor_data(t).unwrap().as_ptr(),
        "no copy"
    );
    drop(file);
    assert_eq!(
        &shared[..],
        &pattern(72, 2)[..],
        "bytes outlive the GgufFile"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn open_reports_the_path_of_a_missing_file() {
    let err = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn empty_file_round_trips_and_v2_reads() {
    let mut bytes = GgufWriter::new().to_vec();
    assert_eq!(bytes.len(), 32, "24-byte header padded to 32");
    let file = GgufFile::from_bytes(Bytes::from(bytes.clone())).unwrap();
    assert!(file.metadata().is_empty() && file.tensors().is_empty());
    bytes[4] = 2;
    assert_eq!(GgufFile::from_bytes(bytes.into()).unwrap().version(), 2);
}

#[test]
fn getters_tolerate_integer_width_and_name_mismatches() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()))
        .unwrap()
        .add_metadata("llama.block_count", Value::I32(30))
        .unwrap()
        .add_metadata("llama.context_length", Value::U64(8192))
        .unwrap()
        .add_metadata("neg", Value::I64(-3))
        .unwrap()
        .add_metadata("eps", Value::F32(1e-5))
        .unwrap()
        .add_metadata("flag", Value::Bool(false))
        .unwrap()
        .add_metadata("tokens", Value::Array(Array::String(vec!["a".into()])))
        .unwrap();
    let f = GgufFile::from_bytes(w.to_vec().into()).unwrap();
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u64("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_u32("llama.context_length").unwrap(), 8192);
    assert_eq!(f.get_i64("neg").unwrap(), -3);
    assert_eq!(f.get_f32("eps").unwrap(), 1e-5);
    assert!(!f.get_bool("flag").unwrap());
    assert_eq!(
        f.get_array("tokens").unwrap().elem_type(),
        ValueType::String
    );
    assert_eq!(f.get("eps").map(Value::value_type), Some(ValueType::F32));

    let msg = |e: GgufError| e.to_string();
    assert!(msg(f.get_u32("neg").unwrap_err()).contains("holds i64 -3, expected an unsigned"));
    assert!(msg(f.get_str("eps").unwrap_err()).contains("\"eps\" holds f32"));
    assert!(msg(f.get_u32("tokens").unwrap_err()).contains("array of string"));
    assert!(msg(f.get_u32("llama.missing").unwrap_err()).contains("\"llama.missing\" is missing"));
}

#[test]
fn tensor_data_refuses_a_tensor_of_another_file() {
    let a = GgufFile::from_bytes(build(None).to_vec().into()).unwrap();
    let mut w = GgufWriter::new();
    w.add_tensor("blk.0.ffn_up.weight", DType::F32, &[1], vec![0u8; 4])
        .unwrap();
    let b = GgufFile::from_bytes(w.to_vec().into()).unwrap();
    let foreign = &b.tensors()[0];
    let err = a.tensor_data(foreign).unwrap_err();
    assert!(
        err.to_string().contains("does not belong to this file"),
        "{err}"
    );
    assert!(a.tensor_bytes(foreign).is_err());
}

#[test]
fn writer_refuses_what_the_reader_would_reject() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", Value::U8(1)).unwrap();
    w.add_tensor("t", DType::F32, &[2], vec![0u8; 8]).unwrap();
    let expect = |r: Result<&mut GgufWriter, GgufError>, frag: &str| {
        let e = r.map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(frag), "{e:?} should contain {frag:?}");
    };
    expect(
        w.clone().add_metadata("k", Value::U8(2)),
        "duplicate metadata key \"k\"",
    );
    expect(
        w.clone().add_metadata("general.alignment", Value::U32(48)),
        "must be a u32 power of two",
    );
    expect(
        w.clone().add_metadata("general.alignment", Value::U64(64)),
        "got u64 64",
    );
    let mut deep = Array::U8(vec![1]);
    for _ in 0..8 {
        deep = Array::Array(vec![deep]);
    }
    expect(
        w.clone().add_metadata("deep", Value::Array(deep)),
        "nested deeper than 8",
    );
    expect(
        w.clone().add_tensor("t", DType::F32, &[2], vec![0u8; 8]),
        "duplicate tensor name \"t\"",
    );
    expect(
        w.clone().add_tensor("u", DType::F32, &[3], vec![0u8; 8]),
        "takes 12 bytes, data has 8",
    );
    expect(
        w.clone()
            .add_tensor("u", DType::F32, &[1, 1, 1, 1, 1], vec![0u8; 4]),
        "1 to 4 non-zero extents",
    );
    expect(
        w.clone().add_tensor("u", DType::F32, &[], vec![]),
        "1 to 4 non-zero extents",
    );
    expect(
        w.clone().add_tensor("u", DType::Q4_0, &[16], vec![0u8; 9]),
        "not whole q4_0 blocks",
    );
    expect(
        w.clone()
            .add_tensor("x".repeat(65), DType::F32, &[1], vec![0u8; 4]),
        "at most 64 allowed",
    );
}
