//! Chat templates: the Jinja template a GGUF stores in `tokenizer.chat_template`, rendered with
//! `minijinja` the way Hugging Face `transformers` renders it (`apply_chat_template`).
//!
//! Like transformers, the environment sets `trim_blocks` and `lstrip_blocks`, enables loop
//! controls (`{% break %}`), and gives the template `messages`, `add_generation_prompt`,
//! `bos_token`, `eos_token` and a `raise_exception(message)` function. The Python string methods
//! templates call (`.strip()`, `.startswith()`, `.split()`…) come from `minijinja-contrib`'s
//! `pycompat`.

use minijinja::{context, Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool` (templates may accept others).
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's calls, as OpenAI writes them (`[{"id", "type": "function", "function":
    /// {"name", "arguments"}}]`, the arguments an object as templates expect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A tool's answer: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// How much work one rendering may do (minijinja's fuel, about one unit per instruction): a
/// long conversation takes well under a tenth of it, a template that loops without end fails
/// within a fraction of a second.
const TEMPLATE_FUEL: u64 = 20_000_000;

/// ChatML, for a model whose file has no template but whose vocabulary has `<|im_start|>`
/// (llama.cpp's `chatml` built-in, as transformers writes it).
pub(crate) const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Gemma's turn format, for a Gemma model whose file has no template but whose vocabulary has
/// `<start_of_turn>` (the template google/gemma-3-*-it ship in `tokenizer_config.json`, which
/// `scripts/reference/gen_fixtures.py` also uses): a system message is prefixed to the first user
/// turn, and the assistant's role is `model`.
pub(crate) const GEMMA: &str = "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}";

/// Renders `source` over `messages`, with the `tools` (OpenAI's `tools` array) when given.
pub(crate) fn render(
    source: &str,
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, Error> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    let template = env.template_from_str(source)?;
    template.render(context! {
        messages => messages,
        tools => tools,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    })
}
