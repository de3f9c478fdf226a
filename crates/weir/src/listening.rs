//! The addresses a long-running command bound, announced before anything else it prints.
//!
//! Every listen address accepts port 0 (the system picks a free port). So that a script or a
//! test never has to guess a free port and hope, each command reports the addresses it actually
//! got: for people, in its start-up line on stderr; with `--output json`, as the first line on
//! stdout, `{"listening": {"api": "127.0.0.1:41234", ...}}`, before any event.

use std::io::Write;
use std::net::SocketAddr;

use crate::cmd_core::OutputFormat;

/// Prints `{"listening": {NAME: ADDR, ...}}` on stdout when the output is JSON (and flushes it,
/// so a reader sees it at once); prints nothing for text, whose start-up lines already say it.
pub fn announce(output: OutputFormat, addresses: &[(&str, SocketAddr)]) {
    if output != OutputFormat::Json {
        return;
    }
    let listening: serde_json::Map<String, serde_json::Value> = addresses
        .iter()
        .map(|(name, address)| ((*name).to_string(), address.to_string().into()))
        .collect();
    let line = serde_json::json!({ "listening": listening });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
