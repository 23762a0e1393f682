//! `hf:OWNER/REPO[:TAG][@REVISION]`: a repository's GGUF picked by its quant tag, as
//! llama.cpp's `-hf` and Ollama pick one. The repository's file list comes from the Hub's tree
//! API (or, offline, from what the cache holds of the repository); without a tag, `Q4_K_M`
//! where the repository has it, else its only GGUF.

use std::path::Path;

use crate::config::HubConfig;
use crate::hf::{self, HfError, HfSpec, DEFAULT_REVISION, PREFIX};

/// The tag taken when a spec names none (llama.cpp's default).
pub const DEFAULT_TAG: &str = "Q4_K_M";

/// A parsed tagged spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedSpec {
    pub owner: String,
    pub repo: String,
    pub tag: Option<String>,
    pub revision: String,
}

impl TaggedSpec {
    /// `hf:OWNER/REPO[:TAG][@REVISION]`, or `None` for any other string (a spec naming a file
    /// is [`HfSpec`]'s).
    pub fn parse(spec: &str) -> Option<TaggedSpec> {
        let rest = spec.strip_prefix(PREFIX)?;
        let (path, revision) = rest.rsplit_once('@').unwrap_or((rest, DEFAULT_REVISION));
        let (repo_path, tag) = match path.split_once(':') {
            Some((p, t)) => (p, Some(t)),
            None => (path, None),
        };
        let (owner, repo) = repo_path.split_once('/')?;
        if repo.contains('/') || tag.is_some_and(|t| t.is_empty() || t.contains('/')) {
            return None;
        }
        Some(TaggedSpec {
            owner: owner.into(),
            repo: repo.into(),
            tag: tag.map(str::to_string),
            revision: revision.into(),
        })
    }

    /// The spec of `file` in this repository (checked as any spec is).
    fn file_spec(&self, file: &str) -> Result<HfSpec, HfError> {
        let at = match self.revision.as_str() {
            DEFAULT_REVISION => String::new(),
            r => format!("@{r}"),
        };
        HfSpec::parse(&format!("{PREFIX}{}/{}/{file}{at}", self.owner, self.repo))
    }
}

/// Resolves a tagged spec to the file it names: the repository's files from the Hub, or from
/// `cache_dir` when the Hub cannot be reached.
pub fn resolve(spec: &str, hub: &HubConfig, cache_dir: &Path) -> Result<HfSpec, HfError> {
    let t = TaggedSpec::parse(spec).ok_or_else(|| HfError::BadSpec {
        spec: spec.into(),
        why: "expected hf:OWNER/REPO[:TAG][@REVISION]".into(),
    })?;
    // Checked as a spec of a file would be, so a bad owner or revision fails before any request.
    t.file_spec("x.gguf")?;
    let listed = match hub.offline {
        true => Err(HfError::Offline(spec.into())),
        false => hf::list_files(&t.owner, &t.repo, &t.revision, hub),
    };
    let files = match listed {
        Ok(f) => f,
        Err(e @ (HfError::Unreachable { .. } | HfError::Offline(_))) => {
            let cached = cached_files(&t, cache_dir, hub.hub_cache.as_deref());
            if cached.is_empty() {
                return Err(e);
            }
            cached
        }
        Err(e) => return Err(e),
    };
    let file = pick(&files, t.tag.as_deref(), spec)?;
    t.file_spec(&file)
}

/// The files the caches hold of `t`'s repository at its revision: wgllm's, and the Hugging Face
/// tools' snapshot of it when `hub_cache` is given.
fn cached_files(t: &TaggedSpec, cache_dir: &Path, hub_cache: Option<&Path>) -> Vec<String> {
    let Ok(spec) = t.file_spec("x.gguf") else {
        return vec![];
    };
    let ours = spec.cache_path(cache_dir).parent().map(Path::to_path_buf);
    let theirs = hub_cache.and_then(|h| spec.hub_snapshot(h));
    let mut out = Vec::new();
    for root in ours.into_iter().chain(theirs) {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(rel) = p.strip_prefix(&root) {
                    out.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `tag` occurs in `name` as a whole word (between non-alphanumeric characters),
/// ignoring case: `Q4_K` is in `model-Q4_K.gguf` but not in `model-Q4_K_M.gguf`.
fn has_tag(name: &str, tag: &str) -> bool {
    let (n, t) = (name.to_ascii_uppercase(), tag.to_ascii_uppercase());
    n.match_indices(&t).any(|(i, _)| {
        let before = n[..i].chars().next_back();
        let after = n[i + t.len()..].chars().next();
        // `_` joins a tag's parts (Q4_K_M), so it does not end one.
        let edge = |c: Option<char>| c.is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_');
        edge(before) && edge(after)
    })
}

/// The part number (from 1) of a split GGUF's file (`DIR/NAME-00001-of-00003.gguf`).
fn split_part(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next().unwrap_or(path);
    wgllm_gguf::split::split_name(name).map(|(_, part, _)| part)
}

/// The file of `files` that `tag` names (see the module documentation); `spec` for errors.
pub fn pick(files: &[String], tag: Option<&str>, spec: &str) -> Result<String, HfError> {
    let bad = |why: String| HfError::Pick {
        spec: spec.into(),
        why,
    };
    let ggufs: Vec<&String> = files
        .iter()
        .filter(|f| f.to_ascii_lowercase().ends_with(".gguf"))
        // Vision projectors ride beside a model's files; they are not models to run.
        .filter(|f| !f.to_ascii_lowercase().contains("mmproj"))
        // A split model is picked by its first file; the others come with it.
        .filter(|f| split_part(f).is_none_or(|part| part == 1))
        .collect();
    if ggufs.is_empty() {
        return Err(bad("the repository has no .gguf file".into()));
    }
    let names = || {
        ggufs
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let matching =
        |t: &str| -> Vec<&String> { ggufs.iter().copied().filter(|f| has_tag(f, t)).collect() };
    let found = match tag {
        Some(t) => matching(t),
        None => match (matching(DEFAULT_TAG), &ggufs[..]) {
            (m, _) if !m.is_empty() => m,
            (_, [one]) => vec![*one],
            _ => {
                return Err(bad(format!(
                    "it names no quant tag and the repository has no {DEFAULT_TAG} file; add \
                     one of its files' tags as :TAG ({})",
                    names()
                )))
            }
        },
    };
    let tag = tag.unwrap_or(DEFAULT_TAG);
    let file = match &found[..] {
        [one] => one.to_string(),
        [] => {
            return Err(bad(format!(
                "no .gguf file of the repository has the tag {tag} (its files: {})",
                names()
            )))
        }
        several => {
            let list: Vec<&str> = several.iter().map(|s| s.as_str()).collect();
            return Err(bad(format!(
                "several files have the tag {tag} ({}); name one as hf:OWNER/REPO/FILE.gguf",
                list.join(", ")
            )));
        }
    };
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn specs_with_and_without_tags() {
        let t = TaggedSpec::parse("hf:o/r:q8_0@v1").unwrap();
        assert_eq!(
            (t.tag.as_deref(), t.revision.as_str()),
            (Some("q8_0"), "v1")
        );
        assert_eq!(TaggedSpec::parse("hf:o/r").unwrap().tag, None);
        assert_eq!(TaggedSpec::parse("hf:o/r/f.gguf"), None);
        assert_eq!(TaggedSpec::parse("hf:o/r:"), None);
        assert_eq!(TaggedSpec::parse("o/r:Q4_0"), None);
    }

    #[test]
    fn tags_pick_one_file_or_say_why_not() {
        let repo = files(&[
            "README.md",
            "m-Q4_K.gguf",
            "m-Q4_K_M.gguf",
            "m-Q8_0.gguf",
            "mmproj-m-Q8_0.gguf",
            "big/m-F16-00001-of-00002.gguf",
            "big/m-F16-00002-of-00002.gguf",
        ]);
        let pick = |t: Option<&str>| pick(&repo, t, "hf:o/r");
        assert_eq!(pick(Some("q4_k")).unwrap(), "m-Q4_K.gguf");
        assert_eq!(pick(Some("Q8_0")).unwrap(), "m-Q8_0.gguf");
        assert_eq!(pick(None).unwrap(), "m-Q4_K_M.gguf");
        let e = pick(Some("Q5_0")).unwrap_err().to_string();
        assert!(
            e.contains("no .gguf file of the repository has the tag Q5_0"),
            "{e}"
        );
        assert!(e.contains("m-Q8_0.gguf") && !e.contains("mmproj"), "{e}");
        assert_eq!(pick(Some("F16")).unwrap(), "big/m-F16-00001-of-00002.gguf");
        let e = pick(Some("m")).unwrap_err().to_string();
        assert!(e.contains("several files have the tag m"), "{e}");
        let one = files(&["only-Q6_K.gguf"]);
        assert_eq!(super::pick(&one, None, "s").unwrap(), "only-Q6_K.gguf");
        let two = files(&["a-Q6_K.gguf", "a-Q8_0.gguf"]);
        let e = super::pick(&two, None, "s").unwrap_err().to_string();
        assert!(e.contains("no Q4_K_M file"), "{e}");
        let none = files(&["README.md"]);
        assert!(super::pick(&none, None, "s").is_err());
    }
}
