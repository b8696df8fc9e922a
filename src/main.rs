fn main() -> std::process::ExitCode {
    keymux::cli::main()
}
