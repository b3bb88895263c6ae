fn main() -> std::process::ExitCode {
    runner::main_with([])
}
