//! The API on plain HTTP with a temporary store and a platform that answers with nothing,
//! for trying the API by hand or running schemathesis against it:
//!
//! ```text
//! cargo run -p runway-api --example dev_server -- 127.0.0.1:7480
//! schemathesis run http://127.0.0.1:7480/openapi.json -H "Authorization: Bearer $TOKEN"
//! ```
//!
//! It prints the admin token on its first line and stops on Ctrl-C or when stdin closes.

use std::sync::Arc;

use axum::body::Bytes;
use runway_api::types::LogLine;
use runway_api::{
    ApiState, BoxFuture, Limits, Platform, ResolvedImage, ServeOptions, SourceRefused, StatusParts,
};
use tokio::sync::mpsc;

#[derive(Debug)]
struct NoPlatform;

impl Platform for NoPlatform {
    fn resolve_image<'a>(
        &'a self,
        _service: &'a str,
        reference: &'a str,
    ) -> BoxFuture<'a, Result<ResolvedImage, String>> {
        let pinned = match reference.split_once('@') {
            Some(_) => reference.to_owned(),
            None => {
                let repo = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
                format!("{repo}@sha256:{}", "0".repeat(64))
            }
        };
        Box::pin(async move {
            Ok(ResolvedImage {
                pinned,
                mirror: None,
            })
        })
    }

    fn url(&self, service: &str, env: &str) -> String {
        format!("https://{service}.{env}.localhost:8443/")
    }

    fn status(&self, _: &str, _: &str) -> BoxFuture<'_, StatusParts> {
        Box::pin(async { StatusParts::default() })
    }

    fn logs(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: usize,
        _: bool,
    ) -> BoxFuture<'_, Result<Vec<LogLine>, String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn follow_logs(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: usize,
    ) -> BoxFuture<'_, Result<mpsc::Receiver<LogLine>, String>> {
        Box::pin(async { Ok(mpsc::channel(1).1) })
    }

    fn source_claim(&self, _: i64, _: &str) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }

    fn source_share(&self, _: i64, _: i64, digest: &str) -> BoxFuture<'_, Result<(), String>> {
        let said = format!("there is no code snapshot {digest} to share");
        Box::pin(async move { Err(said) })
    }

    /// Reads the upload to its end and keeps nothing.
    fn source_put(
        &self,
        _: i64,
        _: &str,
        _: u64,
        mut chunks: mpsc::Receiver<Result<Bytes, String>>,
    ) -> BoxFuture<'_, Result<(), SourceRefused>> {
        Box::pin(async move {
            while let Some(chunk) = chunks.recv().await {
                chunk.map_err(SourceRefused::Invalid)?;
            }
            Ok(())
        })
    }

    fn wake(&self) {}
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7480".to_owned());
    let dir = tempfile::tempdir()?;
    let store = Arc::new(runway_store::SqliteStore::open(
        dir.path().join("runway.db"),
    )?);
    if let Some(token) = runway_api::bootstrap_admin(store.as_ref())? {
        println!("{}", token.expose());
    }
    let state = ApiState::new(
        store,
        Arc::new(NoPlatform),
        runway_secrets::Sealer::new(&runway_secrets::MasterKey::generate()?),
        ["dev", "staging", "production"].map(str::to_owned).to_vec(),
    );
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    eprintln!("listening on http://{listen}");
    let shutdown = async {
        let mut line = String::new();
        let stdin = tokio::io::stdin();
        let mut reader = tokio::io::BufReader::new(stdin);
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line) => {}
        }
    };
    runway_api::serve(
        listener,
        runway_api::router(state, Limits::default()),
        None,
        ServeOptions::default(),
        shutdown,
    )
    .await?;
    Ok(())
}
