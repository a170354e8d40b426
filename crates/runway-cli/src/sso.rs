//! `runway login --sso`: a person signs in through the server's single sign-on provider
//! (`api.sso`) in a browser, and the CLI gets a session token for them.
//!
//! The CLI waits on a port of 127.0.0.1 and opens (or prints) the server's sign-in URL naming
//! that port, the S256 challenge of a verifier it keeps, and a state of its own. Once the
//! person has signed in at the provider and said yes on the server's page (which shows the
//! code this prints), the server sends the browser to `http://127.0.0.1:<port>/callback` with
//! that state and a one-time code, which the CLI redeems with the verifier (`POST
//! /v1/sso/token`): the token never passes through the browser, a code seen by anyone else is
//! of no use to them, and an answer without the state is not taken.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::api::Client;

/// How long a person has to sign in.
const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(300);

/// Signs in through `server`'s provider: the session's token.
pub(crate) fn sign_in(server: &str, ca: Option<&Path>) -> anyhow::Result<String> {
    // PKCE's verifier: 43 to 128 of its unreserved characters; hex is among them.
    let verifier = random_hex()?;
    let state = random_hex()?;
    let challenge = runway_api::sso::challenge_of(&verifier);
    let listener =
        TcpListener::bind("127.0.0.1:0").context("cannot listen on 127.0.0.1 for the sign-in")?;
    let port = listener.local_addr()?.port();
    let url = format!(
        "{}/v1/sso/login?cli_port={port}&cli_challenge={challenge}&cli_state={state}",
        server.trim_end_matches('/')
    );
    eprintln!(
        "Sign in in your browser: {url}\nIt asks before it signs this CLI in: check that it shows \
         the code {}.",
        runway_api::sso::display_code(&challenge)
    );
    if let Some(opener) = crate::everyday::opener() {
        // A browser that cannot start leaves the URL above to open by hand.
        let _ = std::process::Command::new(&opener)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let code = wait_for_code(&listener, &state, Instant::now() + SIGN_IN_TIMEOUT)?;
    let client = Client::new(server, "", ca)?;
    let session = crate::platform::tokio()?
        .block_on(client.redeem_sso(&runway_api::sso::RedeemCode { code, verifier }))?;
    Ok(session.token)
}

/// 32 random bytes, in hex.
fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).context("the OS gives no random numbers")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The one-time code the browser brings to `/callback` with `state`; any other request is
/// answered 404 and the wait goes on.
fn wait_for_code(listener: &TcpListener, state: &str, deadline: Instant) -> anyhow::Result<String> {
    listener.set_nonblocking(true)?;
    loop {
        if Instant::now() > deadline {
            bail!(
                "no sign-in within {} minutes: run `runway login --sso` again",
                SIGN_IN_TIMEOUT.as_secs() / 60
            );
        }
        let (mut stream, _) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e).context("the sign-in's answer"),
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        // A request line longer than any sign-in's is no sign-in.
        let mut line = String::new();
        if BufReader::new(std::io::Read::take(&stream, 8192))
            .read_line(&mut line)
            .is_err()
        {
            continue;
        }
        let query = line
            .split_whitespace()
            .nth(1)
            .and_then(|target| target.strip_prefix("/callback?"))
            .unwrap_or_default();
        let field = |name: &str| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        };
        let code = (field("state") == Some(state))
            .then(|| field("code").map(str::to_owned))
            .flatten();
        let (status, text) = if code.is_some() {
            ("200 OK", "Signed in to Runway: back to your terminal.")
        } else {
            ("404 Not Found", "Not the sign-in's answer.")
        };
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        );
        if let Some(code) = code {
            return Ok(code);
        }
    }
}
