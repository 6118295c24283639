//! The `khai` binary; all behaviour lives in the library.

fn main() -> std::process::ExitCode {
    khai::cli::main()
}
