//! Grammars compiled once per request, and the per-token mask that holds generation to them.

use std::sync::Arc;

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use toktrie::SimpleVob;
use wgllm_models::sampler::Sampler;
use wgllm_models::tokenizer::Tokenizer;

use crate::env::TokenEnv;
use crate::StructuredError;

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid under this schema (`json_schema`).
    JsonSchema(Value),
    /// A grammar in llama.cpp's GBNF (llama-server's `grammar`).
    Gbnf(String),
    /// A grammar in llguidance's Lark dialect (`%json {...}` embeds a schema).
    Lark(String),
    /// Text matching this regular expression, whole.
    Regex(String),
}

/// Whitespace JSON output may put between tokens: a run of at most 16 characters, so that
/// a model cannot spin on newlines where a schema leaves the layout free.
const JSON_WHITESPACE: &str = r"[\x20\x0A\x0D\x09]{1,16}";

impl Grammar {
    fn top_level(&self) -> Result<TopLevelGrammar, StructuredError> {
        Ok(match self {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(with_layout(json!({"type": "object"})))
            }
            Grammar::JsonSchema(s) => {
                if !(s.is_object() || s.is_boolean()) {
                    return Err(StructuredError::Grammar(
                        "a JSON schema must be an object (or true/false)".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(with_layout(s.clone()))
            }
            Grammar::Gbnf(g) => TopLevelGrammar::from_lark(crate::gbnf::to_lark(g)?),
            Grammar::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
        })
    }
}

/// `schema` with [`JSON_WHITESPACE`] as its layout, unless it sets llguidance's own options.
fn with_layout(mut schema: Value) -> Value {
    if let Value::Object(m) = &mut schema {
        m.entry("x-guidance")
            .or_insert_with(|| json!({"whitespace_pattern": JSON_WHITESPACE}));
    }
    schema
}

/// The grammar compiler of one model's vocabulary (its token trie is built once).
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

impl Grammars {
    /// The compiler for `tokenizer`'s vocabulary.
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<Grammars, StructuredError> {
        let env: toktrie::TokEnv = Arc::new(TokenEnv::new(tokenizer));
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| StructuredError::Grammar(e.to_string()))?;
        factory.quiet();
        // Bounds on the work of compiling a grammar and of one token's mask, so a hostile
        // grammar is refused or fails its request instead of stalling the scheduler.
        *factory.limits_mut() = ParserLimits {
            verbose_errors: false,
            ..ParserLimits::default()
        };
        Ok(Grammars {
            factory: Arc::new(factory),
        })
    }

    /// A fresh constraint holding generation to `grammar`, or why `grammar` is unusable.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, StructuredError> {
        let parser = self
            .factory
            .create_parser(grammar.top_level()?)
            .map_err(|e| StructuredError::Grammar(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(StructuredError::Grammar(e));
        }
        Ok(Constraint {
            matcher,
            mask: None,
        })
    }
}

/// One request's position in its grammar.
pub struct Constraint {
    matcher: Matcher,
    /// The next token's mask, once computed.
    mask: Option<SimpleVob>,
}

impl Constraint {
    /// Computes the next token's mask now (while the device runs the step, say), so that
    /// [`Constraint::apply`] only has to read it.
    pub fn prepare(&mut self) -> Result<(), StructuredError> {
        if self.mask.is_none() {
            let m = self
                .matcher
                .compute_mask()
                .map_err(|e| StructuredError::Decode(e.to_string()))?;
            self.mask = Some(m);
        }
        Ok(())
    }

    /// Sets the logit of every token the grammar does not allow next to −∞. Ids past the
    /// vocabulary (padded output rows) are never allowed.
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<(), StructuredError> {
        let (words, n) = self.words()?;
        let n = n.min(logits.len());
        let (inside, past) = logits.split_at_mut(n);
        past.fill(f32::NEG_INFINITY);
        let mut any = false;
        for (chunk, &w) in inside.chunks_mut(32).zip(words) {
            if w == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if w >> b & 1 == 1 {
                    any |= *l != f32::NEG_INFINITY;
                } else {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        match any {
            true => Ok(()),
            false => Err(no_token()),
        }
    }

    /// The allowed token of the largest logit (the first on ties): greedy decoding under the
    /// grammar, reading `logits` in place.
    pub fn argmax(&mut self, logits: &[f32]) -> Result<u32, StructuredError> {
        let (words, n) = self.words()?;
        let mut best: Option<(usize, f32)> = None;
        for (wi, (chunk, &w)) in logits[..n.min(logits.len())]
            .chunks(32)
            .zip(words)
            .enumerate()
        {
            let mut bits = w;
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let Some(&l) = chunk.get(b) else { break };
                if l != f32::NEG_INFINITY && best.is_none_or(|(_, v)| l > v) {
                    best = Some((wi * 32 + b, l));
                }
            }
        }
        best.map(|(id, _)| id as u32).ok_or_else(no_token)
    }

    /// The next token under the grammar from a row's `logits`: the allowed argmax when
    /// `sampler` is greedy, else a draw from the masked logits (`history`: for its penalties).
    /// The grammar is not advanced ([`Constraint::accept`] does).
    pub fn pick(
        &mut self,
        sampler: &mut Sampler,
        logits: &[f32],
        history: &[u32],
    ) -> Result<u32, StructuredError> {
        if sampler.is_greedy() {
            return self.argmax(logits);
        }
        let mut masked = logits.to_vec();
        self.apply(&mut masked)?;
        let id = sampler.sample(&masked, history);
        // A penalty cannot revive a masked token, but a draw past every allowed one would.
        Ok(match masked.get(id as usize) {
            Some(&l) if l != f32::NEG_INFINITY => id,
            _ => wgllm_models::sampler::argmax(&masked),
        })
    }

    /// The prepared mask's words (bit `i % 32` of word `i / 32` allows token `i`) and the
    /// number of tokens it covers.
    fn words(&mut self) -> Result<(&[u32], usize), StructuredError> {
        self.prepare()?;
        let m = self.mask.as_ref().expect("prepared");
        Ok((m.as_slice(), m.len()))
    }

    /// Advances past `token` (an end-of-generation token too). True when the grammar is
    /// complete: nothing may follow, and generation ends.
    pub fn accept(&mut self, token: u32) -> Result<bool, StructuredError> {
        if let Some(m) = &self.mask {
            if !(token < m.len() as u32 && m.is_allowed(token)) {
                return Err(StructuredError::Decode(format!(
                    "the token {token} is outside the grammar's mask"
                )));
            }
        }
        self.mask = None;
        self.matcher
            .consume_token(token)
            .map_err(|e| StructuredError::Decode(e.to_string()))?;
        Ok(self.matcher.is_stopped())
    }

    /// Whether the output so far is a whole sentence of the grammar.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}

fn no_token() -> StructuredError {
    StructuredError::Decode("the grammar allows no token of the vocabulary here".into())
}
