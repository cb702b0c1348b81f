//! The `lab` binary: the command line the library defines (`lab::cli`).

fn main() {
    lab::cli::main()
}
