//! The `khai` binary; all behaviour lives in the library.

/// The allocator counts what each thread holds, which is how script calls get memory budgets
/// (per call, and shared by the calls running at once).
#[global_allocator]
static ALLOCATOR: khai::script::Counting = khai::script::Counting;

fn main() -> std::process::ExitCode {
    khai::cli::main()
}
