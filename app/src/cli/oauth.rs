//! `quarry auth login | refresh | probe`: OAuth 2 from the command line. `login` runs the
//! authorization-code flow on the operator's machine (the URL is printed, the redirect comes
//! back to 127.0.0.1); `refresh` renews a token now; `probe` checks a server by URL before it is
//! registered, authenticating as it demands.

use std::{io::Write, sync::Arc};

use clap::Args;
use quarry_domain::{
    Endpoint, Error, OAuthCredential, OAuthGrant, Secret, ServerDraft, ServerName, TokenAuthMethod,
};
use quarry_ports::Browser;
use quarry_usecases::SignIn;
use zeroize::Zeroizing;

use crate::{compose, config::Settings, failure::Failure, render};

/// The client Quarry signs in as, where the stored credential does not say.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// A client id registered with the authorization server (otherwise Quarry uses its client
    /// metadata document where supported, or registers itself dynamically).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// Read the client secret from this environment variable.
    #[arg(long, value_name = "VAR")]
    pub client_secret_env: Option<String>,
    /// The https URL of a client ID metadata document describing Quarry, used as its client id
    /// where the authorization server supports them.
    #[arg(long, value_name = "URL")]
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for, space-separated (default: what the server's challenge or metadata
    /// names).
    #[arg(long)]
    pub scope: Option<String>,
    /// Visit the authorization URL yourself (GET, following redirects) instead of asking a
    /// person to: for authorization servers that approve without one, such as test servers.
    #[arg(long)]
    pub follow: bool,
}

/// `quarry auth login` options.
#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The server's name.
    pub server: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `quarry auth probe` options.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Use the client-credentials grant (a machine client: --client-id with a secret or a key).
    #[arg(long)]
    pub client_credentials: bool,
    /// For client credentials: sign a JWT assertion (private_key_jwt, ES256) with this PKCS#8
    /// PEM key instead of sending a secret.
    #[arg(long, value_name = "FILE")]
    pub private_key_file: Option<std::path::PathBuf>,
    /// Call this tool once connected (a probe otherwise only lists).
    #[arg(long, value_name = "NAME")]
    pub call_tool: Option<String>,
    /// Allow the server's OAuth endpoints on private, loopback or link-local addresses.
    #[arg(long)]
    pub allow_private_network: bool,
    #[command(flatten)]
    pub client: ClientArgs,
    /// The server's streamable HTTP URL.
    pub url: String,
}

/// Prints the authorization URL for the operator to open.
struct Terminal;

#[async_trait::async_trait]
impl Browser for Terminal {
    async fn open(&self, url: &str) -> Result<(), String> {
        eprintln!("open this URL in a browser to sign in (waiting up to 5 minutes):\n\n  {url}\n");
        Ok(())
    }
}

fn browser(follow: bool) -> Arc<dyn Browser> {
    if follow {
        compose::visitor()
    } else {
        Arc::new(Terminal)
    }
}

fn client_secret(var: Option<&String>) -> Result<Option<Secret>, Error> {
    let Some(var) = var else { return Ok(None) };
    let value = Zeroizing::new(std::env::var(var).map_err(|_| {
        Error::invalid(format!(
            "--client-secret-env {var}: that environment variable is not set"
        ))
    })?);
    Secret::parse("client_secret", value.as_str().to_owned()).map(Some)
}

/// `quarry auth login SERVER`.
pub(super) async fn login(
    service: Arc<quarry_usecases::ResourceService>,
    args: LoginArgs,
) -> Result<quarry_domain::AuthResult, Failure> {
    let server = ServerName::parse(&args.server)?;
    let with = SignIn {
        client_id: args.client.client_id.clone(),
        client_secret: client_secret(args.client.client_secret_env.as_ref())?,
        client_metadata_url: args.client.client_metadata_url.clone(),
        scope: args.client.scope.clone(),
    };
    Ok(service
        .sign_in(server, with, browser(args.client.follow))
        .await?)
}

/// `quarry auth probe URL`.
pub(super) async fn probe(settings: &Settings, args: ProbeArgs, json: bool) -> Result<(), Failure> {
    let mut settings_for = ServerDraft {
        name: "probe".into(),
        endpoint: Some(args.url.clone()),
        oauth_allow_private_network: args.allow_private_network,
        ..ServerDraft::default()
    }
    .into_settings(&|field: &str| match field {
        "endpoint" => "URL".to_owned(),
        other => format!("--{}", other.replace('_', "-")),
    })?;
    debug_assert!(matches!(settings_for.spec.endpoint, Endpoint::Http { .. }));
    settings_for.spec.timeout = std::time::Duration::from_secs(30);
    let grant = if args.client_credentials {
        OAuthGrant::ClientCredentials
    } else {
        OAuthGrant::AuthorizationCode
    };
    let mut credential = OAuthCredential::new(grant);
    credential.client_id = args.client.client_id.clone();
    credential.client_secret = client_secret(args.client.client_secret_env.as_ref())?;
    credential.client_metadata_url = args.client.client_metadata_url.clone();
    credential.scope = args.client.scope.clone();
    if let Some(file) = &args.private_key_file {
        let pem =
            Zeroizing::new(std::fs::read_to_string(file).map_err(|e| {
                Error::invalid(format!("--private-key-file {}: {e}", file.display()))
            })?);
        let mut fields = serde_json::Map::new();
        fields.insert("grant_type".into(), grant.as_str().into());
        fields.insert(
            "client_id".into(),
            credential.client_id.clone().unwrap_or_default().into(),
        );
        fields.insert("private_key".into(), pem.as_str().into());
        fields.insert(
            "token_endpoint_auth_method".into(),
            TokenAuthMethod::PrivateKeyJwt.as_str().into(),
        );
        let parsed = quarry_domain::UpstreamAuth::parse("oauth2", &fields);
        if let Some(serde_json::Value::String(s)) = fields.get_mut("private_key") {
            zeroize::Zeroize::zeroize(s);
        }
        if let quarry_domain::UpstreamAuth::OAuth2(keyed) = parsed? {
            credential.private_key = keyed.private_key;
            credential.token_endpoint_auth_method = keyed.token_endpoint_auth_method;
        }
    }
    let spec = settings_for.spec;
    let (probe, token_requests) = compose::probe(
        settings,
        &spec,
        credential,
        browser(args.client.follow),
        args.call_tool.as_deref(),
    )
    .await?;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(
            &mut out,
            &serde_json::json!({
                "server": probe.server,
                "protocol_version": probe.protocol_version,
                "tools": probe.tools,
                "resources": probe.resources,
                "called": probe.called.as_ref().map(|(name, error)| serde_json::json!({"tool": name, "is_error": error})),
                "token_requests": token_requests,
            }),
        )?;
    } else {
        writeln!(
            out,
            "{} answered (protocol {}): {} tool(s), {}{}; {token_requests} token request(s)",
            if probe.server.is_empty() {
                "the server"
            } else {
                probe.server.as_str()
            },
            probe.protocol_version,
            probe.tools.len(),
            probe
                .resources
                .map_or("no resources capability".to_owned(), |n| format!(
                    "{n} resource(s) on the first page"
                )),
            probe
                .called
                .as_ref()
                .map(|(name, error)| format!(
                    "; called {name}{}",
                    if *error {
                        " (it reported an error)"
                    } else {
                        ""
                    }
                ))
                .unwrap_or_default(),
        )?;
    }
    Ok(())
}
