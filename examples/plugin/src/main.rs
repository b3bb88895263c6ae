//! `runner` with the `scale` plugin registered next to the standard ones.

fn main() -> std::process::ExitCode {
    runner::main_with([std::sync::Arc::new(runner_example_plugin::Scale) as _])
}
