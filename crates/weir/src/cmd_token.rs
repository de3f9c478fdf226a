//! `weir token create|list|revoke`: API tokens, in the database `weir serve` uses (`--db`), so
//! the first admin token can be made before any server runs; a running server sees a new or
//! revoked token at once (it looks tokens up on every request). Servers also manage tokens at
//! `/api/v1/tokens` (an admin token; the dashboard uses that).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use weir_api::auth::{TokenRequest, TokenView, issue_token};
use weir_store::{PostgresStore, TokenScope, TokenStore};

use crate::cmd_core::OutputFormat;
// Quiet on a closed pipe (`weir token list | head -1`), unlike std's.
use crate::stdout::println;

/// Arguments of `weir token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    action: TokenAction,
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Create a token and print its secret, once (weir keeps only a hash of it).
    ///
    /// The secret is the only line on stdout (`-o json`: a JSON object with `secret`), so
    /// `export WEIR_TOKEN=$(weir token create --name me --scope admin)` works.
    Create(CreateArgs),
    /// List the tokens: name, scope, namespaces, created, expires, revoked, last used (never a
    /// secret).
    List(DbArgs),
    /// Revoke a token: every request and session using it is refused from now on.
    Revoke(RevokeArgs),
}

/// Where the tokens are.
#[derive(Debug, Args)]
struct DbArgs {
    /// The database of `weir serve`: its SQLite file or its PostgreSQL URL (`postgres://...`,
    /// docs/SCALE-OUT.md). `create` makes the file when it does not exist (its directory must);
    /// `list` and `revoke` need it to exist.
    /// Default: $XDG_STATE_HOME/weir/weir.db (or ~/.local/state/weir/weir.db).
    #[arg(long, value_name = "PATH|URL", env = "WEIR_DB")]
    db: Option<PathBuf>,
    /// `text` for people, `json` for programs.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The token's name: recorded as the actor of every change made with it. Lowercase
    /// letters, digits, '-' and '.'; never reused, even after a revocation.
    #[arg(long, value_name = "NAME")]
    name: String,
    /// read (every GET), operate (read + commands and outcome reports), admin (operate + apply,
    /// delete, tokens) or evaluate (OFREP only).
    #[arg(long, value_name = "SCOPE", value_parser = ["read", "operate", "admin", "evaluate"])]
    scope: String,
    /// Limit the token to this namespace: it sees and touches nothing elsewhere. Repeatable;
    /// none: every namespace.
    #[arg(long = "namespace", value_name = "NS")]
    namespaces: Vec<String>,
    /// When it stops working: a duration from now (30d, 12h, 90m, 2w) or an RFC 3339 time.
    /// Default: never.
    #[arg(long, value_name = "WHEN")]
    expires: Option<String>,
    #[command(flatten)]
    db: DbArgs,
}

#[derive(Debug, Args)]
struct RevokeArgs {
    /// The token's name.
    #[arg(value_name = "NAME")]
    name: String,
    #[command(flatten)]
    db: DbArgs,
}

/// `weir token ...`.
pub fn token(args: &TokenArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let db = match &args.action {
        TokenAction::Create(create) => &create.db,
        TokenAction::List(db) => db,
        TokenAction::Revoke(revoke) => &revoke.db,
    };
    let path = match &db.db {
        Some(path) => path.clone(),
        None => crate::cmd_run::state_dir().join("weir.db"),
    };
    // A new database is made only for a new token (it then holds that token, so a server on it
    // is never open); listing or revoking on a mistyped path creates nothing.
    let creation = match (&db.db, &args.action) {
        (None, TokenAction::Create(_)) => crate::cmd_serve::Creation::Default,
        (Some(_), TokenAction::Create(_)) => crate::cmd_serve::Creation::Asked("weir token create"),
        _ => {
            crate::cmd_serve::Creation::Refused("give the database of `weir serve` (--db, WEIR_DB)")
        }
    };
    runtime.block_on(async {
        match crate::cmd_serve::postgres_url(&path) {
            Some(url) => {
                let store = PostgresStore::open(url, "weir-token")
                    .await
                    .with_context(|| format!("cannot open {}", crate::cmd_serve::redacted(url)))?;
                let done = act(&store, &args.action).await;
                store.close().await;
                done
            }
            None => {
                let new = !path.exists();
                let store = crate::cmd_serve::open_sqlite(&path, creation, "weir token").await?;
                let done = act(&store, &args.action).await;
                store.close().await;
                if new && !matches!(done, Ok(code) if code == ExitCode::SUCCESS) {
                    // No token was made: an empty database left behind would be an open
                    // server's.
                    remove_database(&path);
                }
                done
            }
        }
    })
}

/// Removes a SQLite database just created (and its WAL files), saying so.
fn remove_database(path: &std::path::Path) {
    let mut removed = std::fs::remove_file(path).is_ok();
    for suffix in ["-wal", "-shm"] {
        let mut other = path.as_os_str().to_owned();
        other.push(suffix);
        removed &= std::fs::remove_file(&other).is_ok() || !std::path::Path::new(&other).exists();
    }
    if removed {
        eprintln!(
            "weir token: removed the new database {} again (no token was created)",
            path.display()
        );
    }
}

async fn act<S: TokenStore>(store: &S, action: &TokenAction) -> Result<ExitCode> {
    match action {
        TokenAction::Create(create) => create_token(store, create).await,
        TokenAction::List(db) => list(store, db).await,
        TokenAction::Revoke(revoke) => revoke_token(store, revoke).await,
    }
}

async fn create_token<S: TokenStore>(store: &S, args: &CreateArgs) -> Result<ExitCode> {
    let request = TokenRequest {
        name: args.name.clone(),
        scope: args.scope.clone(),
        namespaces: (!args.namespaces.is_empty()).then(|| args.namespaces.clone()),
        expires: args.expires.clone(),
    };
    let issued = match issue_token(store, &request, jiff::Timestamp::now()).await {
        Ok(issued) => issued,
        Err(error) => {
            eprintln!("error: {error}");
            if let weir_api::ApiError::Invalid { errors, .. }
            | weir_api::ApiError::Unprocessable { errors, .. } = &error
                && errors.len() > 1
            {
                for item in errors {
                    eprintln!("  - {item}");
                }
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    match args.db.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&issued)?),
        OutputFormat::Text => {
            eprintln!(
                "created token {:?}: {}",
                issued.token.name,
                describe(&issued.token)
            );
            println!("{}", issued.secret);
            eprintln!(
                "This secret will not be shown again (weir keeps only its hash). Give it to clients as WEIR_TOKEN (or --token), or log in to the dashboard with it."
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(token: &TokenView) -> String {
    let namespaces = match &token.namespaces {
        None => "every namespace".to_string(),
        Some(namespaces) => format!("namespaces {}", namespaces.join(", ")),
    };
    let expires = match token.expires_at {
        None => "never expires".to_string(),
        Some(at) => format!("expires {at}"),
    };
    format!("scope {}, {namespaces}, {expires}", token.scope)
}

async fn list<S: TokenStore>(store: &S, db: &DbArgs) -> Result<ExitCode> {
    let tokens = store.list_tokens().await;
    let tokens: Vec<TokenView> = tokens?.iter().map(TokenView::from).collect();
    match db.output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"items": tokens}))?
        ),
        OutputFormat::Text => {
            if tokens.is_empty() {
                eprintln!(
                    "no tokens: the server is open on loopback (create one with weir token create --name NAME --scope {})",
                    TokenScope::Admin
                );
            }
            for token in &tokens {
                let state = match (token.revoked_at, token.expires_at) {
                    (Some(at), _) => format!("revoked {at}"),
                    (None, Some(at)) if at <= jiff::Timestamp::now() => format!("expired {at}"),
                    _ => "active".to_string(),
                };
                let used = token
                    .last_used_at
                    .map_or("never used".to_string(), |at| format!("last used {at}"));
                println!(
                    "{}\t{}\t{state}\tcreated {}\t{used}",
                    token.name,
                    describe(token),
                    token.created_at
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn revoke_token<S: TokenStore>(store: &S, args: &RevokeArgs) -> Result<ExitCode> {
    let revoked = store.revoke_token(&args.name, jiff::Timestamp::now()).await;
    match revoked {
        Ok(token) => {
            let view = TokenView::from(&token);
            match args.db.output {
                OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&view)?),
                OutputFormat::Text => println!(
                    "token {:?} revoked at {}: requests and sessions using it are refused from now on",
                    view.name,
                    view.revoked_at.map_or(String::new(), |at| at.to_string())
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("error: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}
