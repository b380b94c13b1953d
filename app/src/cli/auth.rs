//! `quarry auth configure | test | remove`: an upstream server's credential, from the command
//! line. Secrets are read from an environment variable or stdin, never from arguments (which
//! every user of the machine can see).

use std::{
    io::{BufRead, IsTerminal, Write},
    sync::Arc,
};

use clap::{Args, Subcommand};
use quarry_domain::{AuthResult, Error, ServerName, UpstreamAuth};
use quarry_ports::{Requester, ResourceGateway};
use quarry_usecases::ResourceService;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

use crate::{failure::Failure, render};

/// `quarry auth` options.
#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub action: AuthAction,
    /// Print the result as JSON (the AuthResult of the tools).
    #[arg(long, global = true)]
    pub json: bool,
}

/// `quarry auth configure | test | remove`.
#[derive(Debug, Subcommand)]
pub enum AuthAction {
    /// Store (encrypted) the credential Quarry sends an HTTP server, then test the connection.
    ///
    /// The secret is read from the environment variable --from-env names, or else from the first
    /// line of stdin: `quarry auth configure docs --type bearer_token < token.txt`.
    Configure(ConfigureArgs),
    /// Connect to a server with its stored credential, initialise and list once; say how long it
    /// took. Changes nothing.
    Test {
        /// The server's name.
        server: String,
    },
    /// Delete a server's stored credential (refused while requests to it are in flight).
    Remove {
        /// The server's name.
        server: String,
        /// Remove it even while requests to the server are in flight.
        #[arg(long)]
        force: bool,
    },
    /// Sign in to a server with OAuth (authorization code with PKCE): prints the URL to open,
    /// takes the redirect on 127.0.0.1, and stores the tokens (encrypted). Quarry refreshes them
    /// from then on.
    Login(super::oauth::LoginArgs),
    /// Renew a server's OAuth token now (refresh token or client credentials), then test the
    /// connection with it.
    Refresh {
        /// The server's name.
        server: String,
    },
    /// Connect to a server by URL before registering it, authenticating as it demands (OAuth
    /// sign-in, or client credentials), and say what it offers. Nothing is stored.
    Probe(super::oauth::ProbeArgs),
}

/// `quarry auth configure` options.
#[derive(Debug, Args)]
pub struct ConfigureArgs {
    /// The server's name.
    pub server: String,
    /// api_key (sent in a header), bearer_token (sent as Authorization: Bearer), certificate
    /// (a client certificate for mutual TLS, from --cert-file and --key-file), or oauth2 (a
    /// JSON credentials object on stdin: client_credentials with client_id and client_secret,
    /// or tokens; `quarry auth login` signs a person in instead).
    #[arg(long = "type", value_name = "TYPE")]
    pub auth_type: String,
    /// For api_key: the header to send it in (default X-API-Key).
    #[arg(long)]
    pub header: Option<String>,
    /// For certificate: the client certificate (PEM, leaf first).
    #[arg(long, value_name = "FILE")]
    pub cert_file: Option<std::path::PathBuf>,
    /// For certificate: its private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<std::path::PathBuf>,
    /// Read the secret from this environment variable instead of stdin.
    #[arg(long, value_name = "VAR")]
    pub from_env: Option<String>,
    /// Store it without testing the connection.
    #[arg(long)]
    pub no_test: bool,
}

/// Runs one `quarry auth` command.
pub(super) async fn run(service: Arc<ResourceService>, args: AuthArgs) -> Result<(), Failure> {
    let (what, result) = match args.action {
        AuthAction::Configure(c) => {
            let server = ServerName::parse(&c.server)?;
            let auth = credential(&c)?;
            let result = service
                .configure_auth(server.clone(), auth, !c.no_test, Requester::Operator, None)
                .await?;
            (format!("stored the credential for '{server}'"), result)
        }
        AuthAction::Test { server } => {
            let server = ServerName::parse(&server)?;
            let result = service.test_auth(server.clone()).await?;
            (format!("tested '{server}'"), result)
        }
        AuthAction::Remove { server, force } => {
            let server = ServerName::parse(&server)?;
            let result = service
                .remove_auth(server.clone(), force, Requester::Operator, None)
                .await?;
            (format!("removed the credential of '{server}'"), result)
        }
        AuthAction::Login(login) => {
            let server = login.server.clone();
            let result = super::oauth::login(service, login).await?;
            (format!("signed in to '{server}'"), result)
        }
        AuthAction::Refresh { server } => {
            let server = ServerName::parse(&server)?;
            let result = service
                .refresh_auth(server.clone(), Requester::Operator, None)
                .await?;
            (format!("refreshed the token of '{server}'"), result)
        }
        AuthAction::Probe(_) => {
            return Err(
                Error::invalid("quarry auth probe runs without the gateway's store").into(),
            );
        }
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(&mut out, &result)?;
    } else {
        writeln!(out, "{what}{}", summary(&result))?;
    }
    match (result.success, result.error_code, result.error_message) {
        (false, Some(code), Some(message)) => Err(Error::new(code, message).into()),
        _ => Ok(()),
    }
}

/// ": connected in 12 ms", ": connection failed (E005 ...)", or nothing.
fn summary(result: &AuthResult) -> String {
    match (
        &result.connection_status,
        &result.error_code,
        result.latency_ms,
    ) {
        (_, Some(code), _) => format!(
            "; the connection test failed: {code} {}",
            result.error_message.as_deref().unwrap_or_default()
        ),
        (Some(status), None, Some(ms)) => {
            format!("; connection test: {} in {ms} ms", status.as_str())
        }
        _ => String::new(),
    }
}

/// The credential the flags describe, with its secret from the environment or stdin (or, for
/// a certificate, from its files).
fn credential(c: &ConfigureArgs) -> Result<UpstreamAuth, Error> {
    if c.auth_type == "certificate" {
        let read = |flag: &str, path: &Option<std::path::PathBuf>| -> Result<String, Error> {
            let path = path
                .as_ref()
                .ok_or_else(|| Error::invalid(format!("--type certificate needs {flag}")))?;
            std::fs::read_to_string(path)
                .map_err(|e| Error::invalid(format!("{flag} {}: {e}", path.display())))
        };
        let mut fields = Map::new();
        fields.insert(
            "certificate".into(),
            Value::String(read("--cert-file", &c.cert_file)?),
        );
        let key = Zeroizing::new(read("--key-file", &c.key_file)?);
        fields.insert("private_key".into(), Value::String(key.as_str().to_owned()));
        let parsed = UpstreamAuth::parse(&c.auth_type, &fields);
        if let Some(Value::String(s)) = fields.get_mut("private_key") {
            zeroize::Zeroize::zeroize(s);
        }
        return parsed;
    }
    let secret = match &c.from_env {
        Some(var) => Zeroizing::new(std::env::var(var).map_err(|_| {
            Error::invalid(format!(
                "--from-env {var}: that environment variable is not set"
            ))
        })?),
        None => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                eprintln!("paste the secret for '{}' and press Enter:", c.server);
            }
            let mut line = Zeroizing::new(String::new());
            stdin
                .lock()
                .read_line(&mut line)
                .map_err(|e| Error::invalid(format!("cannot read the secret from stdin: {e}")))?;
            Zeroizing::new(line.trim_end_matches(['\r', '\n']).to_owned())
        }
    };
    if c.auth_type == "oauth2" {
        let mut fields: Map<String, Value> = serde_json::from_str(secret.as_str()).map_err(|_| {
            Error::invalid(
                "--type oauth2 reads a JSON object of OAuth credentials (one line), such as \
                 {\"grant_type\":\"client_credentials\",\"client_id\":\"...\",\"client_secret\":\"...\"}",
            )
        })?;
        let parsed = UpstreamAuth::parse(&c.auth_type, &fields);
        fields.values_mut().for_each(|v| {
            if let Value::String(s) = v {
                zeroize::Zeroize::zeroize(s);
            }
        });
        return parsed;
    }
    let field = if c.auth_type == "bearer_token" {
        "token"
    } else {
        "key"
    };
    let mut fields = Map::new();
    fields.insert(field.to_owned(), Value::String(secret.as_str().to_owned()));
    if let Some(header) = &c.header {
        fields.insert("header".to_owned(), Value::String(header.clone()));
    }
    let parsed = UpstreamAuth::parse(&c.auth_type, &fields);
    if let Some(Value::String(s)) = fields.get_mut(field) {
        zeroize::Zeroize::zeroize(s);
    }
    parsed
}

/// `quarry vault` options.
#[derive(Debug, Args)]
pub struct VaultArgs {
    #[command(subcommand)]
    pub action: VaultAction,
    /// Print the result as JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `quarry vault rotate`.
#[derive(Debug, Subcommand)]
pub enum VaultAction {
    /// Re-wrap every stored credential under a new vault key, while gateways keep serving.
    ///
    /// With a key file, a new key is added to it first (the old one still opens credentials),
    /// every credential's data key is re-wrapped, and the old key is then removed from the file;
    /// an interrupted rotation loses nothing and can be run again. With QUARRY_VAULT_KEY, give
    /// the new key first and the old one after a comma, rotate, then keep only the new one.
    Rotate,
}

/// Runs one `quarry vault` command.
pub(super) async fn vault(service: Arc<ResourceService>, args: VaultArgs) -> Result<(), Failure> {
    match args.action {
        VaultAction::Rotate => {
            let rotation = service
                .rotate_vault_key(&|done, total| {
                    eprintln!("re-wrapped {done} of {total} credential(s)");
                })
                .await?;
            let mut out = std::io::stdout().lock();
            if args.json {
                render::json(&mut out, &rotation)?;
            } else {
                writeln!(
                    out,
                    "every credential ({} of them, {} re-wrapped now) is sealed under key {}",
                    rotation.total, rotation.rewrapped, rotation.key_id
                )?;
            }
            Ok(())
        }
    }
}
