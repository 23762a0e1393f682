//! `wgllm`: the command-line front end. Each subcommand lives in its own module under [`cmd`];
//! this file only parses arguments and turns an error into one `error: …` line and exit code 1.

use std::process::ExitCode;

use clap::Parser;

mod cmd;

/// Run GGUF language models on any GPU through WebGPU.
#[derive(Parser)]
#[command(
    name = "wgllm",
    version,
    propagate_version = true,
    after_help = "Examples:\n  \
        wgllm run --chat -p \"What is the capital of France?\"   (default model, pulled on first use)\n  \
        wgllm run -m model.gguf -p \"Once upon a time\" -n 64 --temp 0\n  \
        wgllm embed -m minilm \"A man is eating food.\" --normalize   (an embedding model)\n  \
        wgllm convert ./checkpoint -o model.gguf --type q8_0    (a Hugging Face folder into GGUF)\n  \
        wgllm devices\n  \
        wgllm web --port 8080                                  (the chat page in a browser)\n  \
        wgllm info model.gguf\n  \
        wgllm gguf dequant model.gguf output_norm.weight --rows 2\n\n\
        Run `wgllm help <COMMAND>` for the details of one command."
)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        // `wgllm info model.gguf | head` closes our stdout early; that is not a failure.
        Err(e) if cmd::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
