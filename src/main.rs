//! The `remedy` binary: the command line is in the library (`remedy::cli`),
//! where its parts are tested.

fn main() -> std::process::ExitCode {
    remedy::cli::main()
}
