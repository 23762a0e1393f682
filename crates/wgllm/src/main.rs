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
    /// Log more on stderr: -v debug lines, -vv trace (RUST_LOG, in tracing's filter syntax,
    /// chooses instead when set).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: cmd::Command,
}

/// Logs go to stderr through `tracing` (wgpu's `log` records included): by default wgllm's
/// informational lines (a server's request lines) and everyone's warnings. wgpu probes every
/// backend; a GL driver failing to load while Vulkan serves is not news, so `wgpu_hal::gles`
/// speaks from `-v` on.
fn init_logs(verbose: u8) {
    let default = match verbose {
        0 => "warn,wgpu_hal::gles=off,wgllm=info,wgllm_server=info",
        1 => "info,wgllm=debug,wgllm_server=debug,wgllm_webgpu=debug",
        _ => "debug,wgllm=trace,wgllm_server=trace,wgllm_webgpu=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.verbose);
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
