//! Standard output and error for every command. `println!` and `eprint!` panic when their
//! stream is a pipe whose reader has gone (`tensor-dsl records show | head -1`); here a
//! closed stdout ends the program quietly with status 0, as `cat` and `grep` do, and
//! messages to a closed stderr are dropped.

use std::io::Write;

/// Writes `text` and a newline to stdout. A closed pipe exits the process with status 0
/// (nothing more can be said to that reader); another failure is an error for the command.
pub fn line(text: impl std::fmt::Display) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("cannot write to standard output: {e}")),
    }
}

/// Writes `text` as it is (no newline added) to stderr: progress and error messages, which
/// are lost, not fatal, when stderr cannot be written.
pub fn note(text: impl std::fmt::Display) {
    let _ = write!(std::io::stderr().lock(), "{text}");
}
