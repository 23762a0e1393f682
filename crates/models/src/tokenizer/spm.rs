//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`: Llama 2, Gemma 3), written after
//! llama.cpp's `llm_tokenizer_spm_session` (`src/llama-vocab.cpp`).
//!
//! The `tokenizers` crate's BPE model does not fit these vocabularies: they carry no merge list,
//! only a score per token, and the merge order is "highest score first". So the algorithm is
//! implemented here directly:
//!
//! 1. the text (spaces already written as `▁`) is cut into UTF-8 characters;
//! 2. every adjacent pair whose concatenation is a token enters a priority queue keyed by that
//!    token's score (ties: leftmost first);
//! 3. the best pair is merged, stale entries (a side already merged away) are skipped, and the
//!    new symbol's pairs with its neighbours are queued, until the queue is empty;
//! 4. each final symbol is its token, or, when it is a single character that is not in the
//!    vocabulary, one byte-fallback token `<0xXX>` per UTF-8 byte.
//!
//! llama.cpp also keeps a `rev_merge` table to re-split a final symbol that is not a token; with
//! valid UTF-8 input that never happens (a merge only forms tokens, so a final symbol that is not
//! a token is a single character), so it is not needed here.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

/// One symbol: a byte range of the text, linked to its live neighbours.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of two adjacent symbols into a token with `score`.
#[derive(Debug)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Higher score first, then the leftmost (llama.cpp `llm_bigram_spm::comparator`).
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// The token for byte `b`: `<0xXX>`, else the one-byte text itself, else the unknown token
/// (llama.cpp `byte_to_token`, which would throw where this falls back to `<unk>`; with neither,
/// the byte is dropped).
fn byte_token(vocab: &Vocab, b: u8) -> Option<u32> {
    vocab
        .id(&format!("<0x{b:02X}>"))
        .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| vocab.id(s)))
        .or(vocab.unk)
}

struct Session<'a> {
    vocab: &'a Vocab,
    text: &'a str,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl Session<'_> {
    fn try_add(&mut self, left: Option<usize>, right: Option<usize>) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (self.symbols[left], self.symbols[right]);
        let piece = &self.text[l.start..l.start + l.len + r.len];
        if let Some(id) = self.vocab.id(piece) {
            self.queue.push(Bigram {
                left,
                right,
                score: self.vocab.scores[id as usize],
                size: piece.len(),
            });
        }
    }
}

/// Appends the tokens of `text`, in which spaces are already escaped as `▁`.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let n = text.chars().count();
    let symbols = text
        .char_indices()
        .enumerate()
        .map(|(i, (start, c))| Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: (i + 1 < n).then_some(i + 1),
        })
        .collect();
    let mut s = Session {
        vocab,
        text,
        symbols,
        queue: BinaryHeap::new(),
    };
    for i in 1..n {
        s.try_add(Some(i - 1), Some(i));
    }
    while let Some(b) = s.queue.pop() {
        let (l, r) = (s.symbols[b.left], s.symbols[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        s.symbols[b.left].len += r.len;
        s.symbols[b.right].len = 0;
        s.symbols[b.left].next = r.next;
        if let Some(next) = r.next {
            s.symbols[next].prev = Some(b.left);
        }
        s.try_add(l.prev, Some(b.left));
        s.try_add(Some(b.left), r.next);
    }
    let mut at = (n > 0).then_some(0);
    while let Some(i) = at {
        let sym = s.symbols[i];
        let piece = &text[sym.start..sym.start + sym.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| byte_token(vocab, b))),
        }
        at = sym.next;
    }
}
