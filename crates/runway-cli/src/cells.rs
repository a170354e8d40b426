//! `runway cells`: routable tokens (decode, encode) and a routing decision explained, with
//! nothing sent (the router itself is `runway router`).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use http::{HeaderMap, HeaderName, HeaderValue};
use routable_token::{ClaimValue, Claims};
use runway_cells::{Action, BODY_PREFIX_BYTES, RequestView, Rules, StaticTopology};
use serde_json::json;

use crate::platform::OutputArg;
use crate::{EXIT_INVALID, Output, print_stdout};

/// `runway cells ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum CellsCommand {
    /// Routable tokens (GitLab's `glrt-`, `glpat-`, ...): read the claims a router routes by,
    /// or write a token for tests.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Say where the router would send a request, and why, sending nothing: the rule that
    /// matched (and why each before it did not), the claims its transform decoded, the
    /// classification and the cell. Exit 0 whatever the cell; 2 when a file is unusable.
    Route(RouteArgs),
}

/// `runway cells token ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Print a routable token's claims, in decimal (in JSON a number, or a string of digits
    /// for one beyond 64 bits); exit 1, saying why, when it does not decode (a checksum that
    /// does not match, a length that does not fit, a payload over 159 bytes, a payload with
    /// no claim, which GitLab does not read as a routable token either).
    Decode(DecodeArgs),
    /// Print a routable token for these claims, as GitLab writes one: `--claim c=1 --claim
    /// o=1007`; a blank value is left out, `0` is kept; `c` or `o` is required.
    Encode(EncodeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// The token, or `-` to read it from standard input (keeping it out of the process list
    /// and the shell's history).
    token: String,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Args)]
pub(crate) struct EncodeArgs {
    /// What the token starts with: `glrt-` (a runner made in the UI), `glrtr-` (registered
    /// with a registration token), `glpat-` (a personal access token), or none.
    #[arg(long, default_value = "")]
    prefix: String,
    /// A claim, `KEY=VALUE` with KEY one of c (cell), o (organization), g (group),
    /// p (project), u (user), t (runner type: 1 instance, 2 group, 3 project). Repeatable.
    #[arg(long = "claim", value_name = "KEY=VALUE", required = true)]
    claims: Vec<String>,
    /// The 16 random bytes, as 32 hexadecimal digits, for a reproducible token (tests);
    /// default: from the operating system.
    #[arg(long, value_name = "HEX")]
    random_hex: Option<String>,
    #[command(flatten)]
    output: OutputArg,
}

#[derive(Debug, Args)]
pub(crate) struct RouteArgs {
    /// The rule file, in GitLab's HTTP router format (a JSON list of rules, or one rule).
    #[arg(long, value_name = "FILE")]
    rules: PathBuf,
    /// The topology file: `cells: [{id, address, session_prefix}]` and `legacy_cell: ID`.
    #[arg(long, value_name = "FILE")]
    topology: PathBuf,
    /// A request header, `'Name: value'`. Repeatable (`--header 'Cookie: ...'` for cookies).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// The request's path.
    #[arg(long, default_value = "/")]
    path: String,
    /// A file holding the request's body, of which the first 16 KiB are read (for a
    /// `json-body` rule), as the router reads them.
    #[arg(long, value_name = "FILE")]
    body: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArg,
}

pub(crate) fn run(command: &CellsCommand) -> anyhow::Result<ExitCode> {
    match command {
        CellsCommand::Token(TokenCommand::Decode(args)) => decode(args),
        CellsCommand::Token(TokenCommand::Encode(args)) => encode(args),
        CellsCommand::Route(args) => route(args),
    }
}

/// What each claim key means, for people.
fn meaning(key: &str) -> &'static str {
    match key {
        "c" => "cell",
        "o" => "organization",
        "g" => "group",
        "p" => "project",
        "u" => "user",
        "t" => "runner type",
        _ => "unknown to this version",
    }
}

/// Each claim a JSON number, or its decimal digits as a string when beyond 64 bits (which a
/// JSON number would lose in most readers).
fn claims_json(claims: &Claims) -> serde_json::Value {
    claims
        .iter()
        .map(|(key, value)| {
            let value = value
                .to_u64()
                .map_or_else(|| json!(value.decimal()), |n| json!(n));
            (key.to_owned(), value)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn decode(args: &DecodeArgs) -> anyhow::Result<ExitCode> {
    let token = if args.token == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the token from standard input")?;
        text
    } else {
        args.token.clone()
    };
    let claims = match routable_token::decode(token.trim()) {
        Ok(claims) => claims,
        Err(error) => {
            eprintln!("error: the token does not decode: {error}");
            if args.output.output == Output::Json {
                print_stdout(&format!(
                    "{:#}\n",
                    json!({"error": {"code": "invalid_token", "message": error.to_string()}})
                ));
            }
            return Ok(ExitCode::from(EXIT_INVALID));
        }
    };
    match args.output.output {
        Output::Json => print_stdout(&format!("{}\n", claims_json(&claims))),
        Output::Text => {
            let mut text = String::new();
            for (key, value) in claims.iter() {
                let note = match (key, value.to_u64()) {
                    ("t", Some(1)) => " (instance)",
                    ("t", Some(2)) => " (group)",
                    ("t", Some(3)) => " (project)",
                    _ => "",
                };
                text.push_str(&format!("{key}  {:<13} {value}{note}\n", meaning(key)));
            }
            print_stdout(&text);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn encode(args: &EncodeArgs) -> anyhow::Result<ExitCode> {
    let mut claims = Claims::new();
    for claim in &args.claims {
        let Some((key, value)) = claim.split_once('=') else {
            bail!("--claim {claim}: expected KEY=VALUE, e.g. c=1");
        };
        let value = value.trim();
        if value.is_empty() {
            // GitLab leaves a blank claim out.
            continue;
        }
        // Of any size a token holds, as GitLab writes an integer.
        let value = ClaimValue::from_decimal(value).with_context(|| {
            format!(
                "--claim {claim}: the value must be a whole number from 0, e.g. {key}=1, of \
                 at most {} base-36 digits",
                routable_token::MAX_CLAIM_DIGITS
            )
        })?;
        claims.insert_value(key.trim(), value);
    }
    let random = match &args.random_hex {
        Some(hex) => parse_hex(hex).context("--random-hex")?,
        None => {
            let mut bytes = [0u8; routable_token::RANDOM_BYTES];
            getrandom::fill(&mut bytes)
                .map_err(|e| anyhow::anyhow!("no random bytes from the system: {e}"))?;
            bytes
        }
    };
    let token = routable_token::encode(&args.prefix, &claims, &random)
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    match args.output.output {
        Output::Json => print_stdout(&format!(
            "{:#}\n",
            json!({"token": token, "claims": claims_json(&claims)})
        )),
        Output::Text => print_stdout(&format!("{token}\n")),
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_hex(hex: &str) -> anyhow::Result<[u8; routable_token::RANDOM_BYTES]> {
    let hex = hex.trim();
    if hex.len() != 2 * routable_token::RANDOM_BYTES || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        bail!(
            "expected 32 hexadecimal digits (16 bytes), got {} characters",
            hex.len()
        );
    }
    let mut bytes = [0u8; routable_token::RANDOM_BYTES];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
    }
    Ok(bytes)
}

fn route(args: &RouteArgs) -> anyhow::Result<ExitCode> {
    let rules = Rules::load(&args.rules)?;
    let topology = StaticTopology::load(&args.topology)?;
    let mut headers = HeaderMap::new();
    for header in &args.headers {
        let Some((name, value)) = header.split_once(':') else {
            bail!("--header {header}: expected 'Name: value'");
        };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .with_context(|| format!("--header {header}: not a header name"))?;
        let value = HeaderValue::from_str(value.trim())
            .with_context(|| format!("--header {header}: not a header value"))?;
        headers.append(name, value);
    }
    let body = match &args.body {
        Some(path) => {
            let file = std::fs::File::open(path)
                .with_context(|| format!("--body: cannot read {}", path.display()))?;
            let mut prefix = Vec::new();
            file.take(BODY_PREFIX_BYTES as u64)
                .read_to_end(&mut prefix)
                .with_context(|| format!("--body: cannot read {}", path.display()))?;
            Some(prefix)
        }
        None => None,
    };
    // As the router: a body is read only when it may be JSON.
    let json = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.to_ascii_lowercase().contains("json"));
    let body = body.filter(|_| json);
    let path = args.path.split('?').next().unwrap_or("/");
    let (decision, passed) = rules.explain(&RequestView {
        path,
        headers: &headers,
        body_prefix: body.as_deref(),
    });
    let Some(routed) = topology.route(decision) else {
        bail!(
            "{}: the legacy cell is not among the cells",
            args.topology.display()
        );
    };
    let decision = &routed.decision;
    match args.output.output {
        Output::Json => {
            let classify = match &decision.action {
                Action::Classify { kind, value } => json!({"type": kind.as_str(), "value": value}),
                Action::Proxy => serde_json::Value::Null,
            };
            let passed: Vec<serde_json::Value> = passed
                .iter()
                .map(|p| json!({"rule": p.rule, "reason": p.reason}))
                .collect();
            print_stdout(&format!(
                "{:#}\n",
                json!({
                    "rule": decision.rule,
                    "action": decision.action.header_value(),
                    "classify": classify,
                    "claims": decision.claims.as_ref().map(claims_json),
                    "cell": routed.cell,
                    "fell_back": routed.fell_back.as_ref().map(ToString::to_string),
                    "passed": passed,
                })
            ));
        }
        Output::Text => {
            let mut text: String = passed
                .iter()
                .map(|p| format!("passed    {}: {}\n", p.rule, p.reason))
                .collect();
            text.push_str(&format!(
                "rule      {}\n",
                decision
                    .rule
                    .as_deref()
                    .unwrap_or("(none: no rule matched)")
            ));
            if let Some(claims) = &decision.claims {
                text.push_str(&format!("claims    {claims}\n"));
            }
            match &decision.action {
                Action::Classify { kind, value } => {
                    text.push_str(&format!("action    classify {} {value}\n", kind.as_str()));
                }
                Action::Proxy => text.push_str("action    proxy (to the legacy cell)\n"),
            }
            if let Some(reason) = &routed.fell_back {
                text.push_str(&format!("fell back {reason}: to the legacy cell\n"));
            }
            text.push_str(&format!(
                "cell      {} at {}\n",
                routed.cell.id, routed.cell.address
            ));
            print_stdout(&text);
        }
    }
    Ok(ExitCode::SUCCESS)
}
