//! The vocabulary as llguidance sees it: each token's bytes in a token trie (special tokens
//! behind the 0xFF marker, so grammar text never matches them by accident), every
//! end-of-generation token as EOS, and tokenization of grammar-forced text by our tokenizer.

use std::sync::Arc;

use toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use wgllm_models::tokenizer::{TokenType, Tokenizer};

pub(crate) struct TokenEnv {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl TokenEnv {
    pub(crate) fn new(tokenizer: Arc<Tokenizer>) -> TokenEnv {
        let n = tokenizer.vocab_size() as u32;
        let words: Vec<Vec<u8>> = (0..n)
            .map(|id| match tokenizer.token_type(id) {
                TokenType::Control | TokenType::Unknown => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tokenizer.token_str(id).unwrap_or("").as_bytes());
                    w
                }
                _ => tokenizer.piece(id).into_owned(),
            })
            .collect();
        let eog: Vec<u32> = tokenizer.eog_tokens().collect();
        let eos = tokenizer.eos().or(eog.first().copied()).unwrap_or(0);
        let mut info = TokRxInfo::new(n, eos);
        info.tok_bos = tokenizer.bos();
        info.tok_pad = tokenizer.pad();
        let mut trie = TokTrie::from(&info, &words);
        if !eog.is_empty() {
            trie = trie.with_eos_tokens(&eog);
        }
        TokenEnv { tokenizer, trie }
    }
}

impl TokenizerEnv for TokenEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Forced text is the grammar's, UTF-8 but for a cut multi-byte character at its end;
        // tokenizing the valid prefix is enough (llguidance re-checks the tokens it gets).
        let text = match std::str::from_utf8(s) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&s[..e.valid_up_to()]).unwrap_or(""),
        };
        self.tokenizer.encode(text, false).unwrap_or_default()
    }
}
