//! Standard output for the command line's verbs, quiet on a closed pipe.
//!
//! `std`'s `println!` panics when standard output is gone (`weir status NAME | head -1`: `head`
//! exits after its line, the next line meets a closed pipe) and Rust ignores SIGPIPE, so the
//! command would die with a panic and exit status 101. These `println!` and `print!` (imported
//! by name, they take the place of `std`'s in a module) end the process quietly with status 0
//! instead: the reader has all it wanted. Any other write error is said on stderr, status 1.

use std::fmt;
use std::io::{self, Write};

/// `std::println!`, ending the process quietly when standard output is a closed pipe.
macro_rules! println {
    () => {
        $crate::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `std::print!`, ending the process quietly when standard output is a closed pipe.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}

pub(crate) use {print, println};

/// Writes `text` to standard output; see the module documentation for the errors.
pub(crate) fn write(text: fmt::Arguments<'_>) {
    let written = io::stdout().lock().write_fmt(text);
    if let Err(error) = written {
        gone(&error);
    }
}

/// Ends the process after a failed write to standard output: quietly with status 0 when the
/// reader went away, else saying why with status 1.
fn gone(error: &io::Error) -> ! {
    if error.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: cannot write to standard output: {error}");
    std::process::exit(1);
}
