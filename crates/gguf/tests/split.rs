//! Split models (`NAME-00001-of-0000N.gguf`, as llama.cpp's `gguf-split` writes them) open from
//! their first file with every part's tensors; parts missing, cut short, out of place or
//! overlapping are errors naming the part.

use std::path::{Path, PathBuf};

use wgllm_core::DType;
use wgllm_gguf::split::{part_name, split_name};
use wgllm_gguf::{GgufError, GgufFile, GgufWriter, Value};

/// Tensor `i`: 64 f32 values from `i`.
fn data(i: usize) -> Vec<u8> {
    (0..64)
        .flat_map(|k| ((i * 100 + k) as f32).to_le_bytes())
        .collect()
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("wgllm-split-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `parts` files of model `m` into `dir`, part p holding the tensors named in
/// `tensors[p]` (`t{i}`), the first the metadata and `split.tensors.count` = `total`; returns
/// the paths.
fn write_split(dir: &Path, tensors: &[&[usize]], total: i32) -> Vec<PathBuf> {
    let count = tensors.len() as u32;
    tensors
        .iter()
        .enumerate()
        .map(|(p, ids)| {
            let mut w = GgufWriter::new();
            if p == 0 {
                w.add_metadata("general.architecture", Value::String("llama".into()))
                    .unwrap();
                w.add_metadata("split.tensors.count", Value::I32(total))
                    .unwrap();
            }
            w.add_metadata("split.no", Value::U16(p as u16)).unwrap();
            w.add_metadata("split.count", Value::U16(count as u16))
                .unwrap();
            for &i in *ids {
                w.add_tensor(format!("t{i}"), DType::F32, &[64], data(i))
                    .unwrap();
            }
            let path = dir.join(part_name("m", p as u32 + 1, count));
            std::fs::write(&path, w.to_vec()).unwrap();
            path
        })
        .collect()
}

fn split_error(r: Result<GgufFile, GgufError>) -> String {
    match r {
        Err(e @ GgufError::Split { .. }) => e.to_string(),
        Err(e) => panic!("not a split error: {e}"),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn split_names_parse_and_print() {
    assert_eq!(
        split_name("Qwen3-8B-Q4_K_M-00002-of-00005.gguf"),
        Some(("Qwen3-8B-Q4_K_M", 2, 5))
    );
    assert_eq!(split_name("m-00006-of-00005.gguf"), None);
    assert_eq!(split_name("m-0001-of-0002.gguf"), None);
    assert_eq!(split_name("model.Q4_0.gguf"), None);
    assert_eq!(part_name("m", 3, 12), "m-00003-of-00012.gguf");
}

#[test]
fn a_split_model_opens_from_its_first_file_with_every_tensor() {
    let d = Dir::new("ok");
    let paths = write_split(&d.0, &[&[0, 1], &[2], &[3, 4]], 5);
    let f = GgufFile::open(&paths[0]).unwrap();
    assert_eq!(f.split_count(), 3);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.tensors().len(), 5);
    for i in 0..5 {
        let t = f.tensor(&format!("t{i}")).unwrap();
        assert_eq!(f.tensor_data(t).unwrap(), &data(i)[..], "t{i}");
    }
    let total: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(f.file_len(), total);
}

#[test]
fn a_missing_or_cut_part_is_named() {
    let d = Dir::new("missing");
    let paths = write_split(&d.0, &[&[0], &[1], &[2]], 3);
    let bytes = std::fs::read(&paths[1]).unwrap();
    std::fs::write(&paths[1], &bytes[..bytes.len() - 100]).unwrap();
    let e = split_error(GgufFile::open(&paths[0]));
    assert!(e.contains("part 2 of 3"), "{e}");
    std::fs::remove_file(&paths[2]).unwrap();
    std::fs::write(&paths[1], &bytes).unwrap();
    let e = split_error(GgufFile::open(&paths[0]));
    assert!(e.contains("part 3 of 3") && e.contains("is missing"), "{e}");
}

#[test]
fn a_later_part_points_at_the_first() {
    let d = Dir::new("later");
    let paths = write_split(&d.0, &[&[0], &[1]], 2);
    let e = split_error(GgufFile::open(&paths[1]));
    assert!(e.contains("open the first, m-00001-of-00002.gguf"), "{e}");
}

#[test]
fn overlapping_parts_and_wrong_counts_are_refused() {
    let d = Dir::new("overlap");
    let paths = write_split(&d.0, &[&[0, 1], &[1]], 3);
    let e = split_error(GgufFile::open(&paths[0]));
    assert!(e.contains("\"t1\" is in an earlier part"), "{e}");
    let d = Dir::new("count");
    let paths = write_split(&d.0, &[&[0], &[1]], 3);
    let e = split_error(GgufFile::open(&paths[0]));
    assert!(
        e.contains("split.tensors.count is 3, the 2 parts hold 2"),
        "{e}"
    );
}

#[test]
fn a_part_in_the_wrong_place_is_refused() {
    let d = Dir::new("place");
    let paths = write_split(&d.0, &[&[0], &[1], &[2]], 3);
    std::fs::copy(&paths[2], &paths[1]).unwrap();
    let e = split_error(GgufFile::open(&paths[0]));
    assert!(e.contains("says it is part 3 of 3, not part 2 of 3"), "{e}");
}
