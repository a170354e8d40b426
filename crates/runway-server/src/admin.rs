//! `runway server`'s commands besides serving: `check-config`, `migrate-store` and
//! `admin-token`.

use std::path::Path;

use anyhow::{Context, bail};
use runway_store::{DatabaseTrust, PostgresStore, SqliteStore};

use crate::config::ServerConfig;
use crate::data_dir::lock_data_dir;
use crate::driver::Drivers;

/// `runway server check-config`: the configuration and what it names (the certificate
/// authority when it exists, the control channel's certificates, OIDC and Vault settings, the
/// cells' files, the store URL's form, a named master key, the driver's own), checked without
/// starting anything or reaching the database or a cluster. Returns what the operator should
/// know besides.
pub fn check_config(config: &ServerConfig, drivers: &Drivers) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    let ca_dir = config.api.ca_dir();
    if ca_dir.join("ca.pem").exists() || ca_dir.join("ca-key.pem").exists() {
        runway_ingress::LocalCa::load_or_create(&ca_dir).with_context(|| {
            format!(
                "api.tls.ca_dir: cannot use the certificate authority in {}",
                ca_dir.display()
            )
        })?;
    } else {
        notes.push(format!(
            "the certificate authority will be made in {} at the first start",
            ca_dir.display()
        ));
    }
    if let Some(remote) = &config.ingress.remote {
        runway_ingress::control_tls::ClientTls::load(&remote.tls_dir, &remote.server_name)
            .context("ingress.remote.tls_dir: cannot use the control channel's certificates")?;
    }
    runway_api::oidc::Verifier::new(&config.api.oidc).map_err(anyhow::Error::msg)?;
    if let Some(sso) = &config.api.sso {
        runway_api::sso::Sso::new(sso).map_err(anyhow::Error::msg)?;
    }
    if let Some(vault) = &config.secrets.vault {
        runway_api::vault::Vault::new(vault).map_err(anyhow::Error::msg)?;
    }
    for (index, cells) in config.ingress.cells.iter().enumerate() {
        runway_cells::Rules::load(&cells.rules)
            .with_context(|| format!("ingress.cells[{index}].rules"))?;
        runway_cells::StaticTopology::load(&cells.topology)
            .with_context(|| format!("ingress.cells[{index}].topology"))?;
    }
    if let Some(url) = &config.store.url {
        PostgresStore::check_url(url).context("store.url")?;
        if let DatabaseTrust::Pem(pem) = config.store.trust()? {
            PostgresStore::check_trust(&pem).context("store.ca_file")?;
        }
    }
    if config.store.master_key.is_some() {
        config.store.master_key(&config.api.data_dir)?;
    }
    drivers
        .chosen(&config.runtime.kind)?
        .check_config(&config.runtime)?;
    Ok(notes)
}

/// `runway server migrate-store`: copies the data directory's SQLite store into the empty
/// PostgreSQL database `to` (`-`: its URL read from standard input), under the data
/// directory's lock. Returns what was done, a line each.
pub fn migrate_store(
    data_dir: &Path,
    to: &str,
    trust: &DatabaseTrust,
) -> anyhow::Result<Vec<String>> {
    let path = data_dir.join("runway.db");
    if !path.is_file() {
        bail!(
            "no store at {}: give the data directory `runway server` runs with (--data-dir)",
            path.display()
        );
    }
    let url = if to == "-" {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("cannot read the URL from standard input")?;
        line.trim().to_owned()
    } else {
        to.to_owned()
    };
    PostgresStore::check_url(&url).context("--to")?;
    // No server writes while it is copied.
    let _lock = lock_data_dir(data_dir)?;
    let from = SqliteStore::open(&path)
        .with_context(|| format!("cannot open the store {}", path.display()))?;
    let target =
        PostgresStore::open_trusting(&url, trust).context("--to: cannot open the target store")?;
    let copied =
        runway_store::copy_sqlite_to_postgres(&from, &target).context("cannot copy the store")?;
    let mut done: Vec<String> = copied
        .tables
        .iter()
        .map(|(table, rows)| format!("copied {rows} row{} of {table}", plural(*rows)))
        .collect();
    done.push(format!(
        "{} is copied. Set `store: {{url: ...}}` in the configuration, and give every replica \
         {} (the secrets are sealed with it). The SQLite file is left as it was.",
        path.display(),
        data_dir.join("master.key").display()
    ));
    Ok(done)
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `runway server admin-token`: revokes every admin token and makes a new one; returns it and
/// how many were revoked.
pub fn admin_token(config: &ServerConfig) -> anyhow::Result<(String, usize)> {
    let path = config.api.data_dir.join("runway.db");
    if config.store.url.is_none() && !path.is_file() {
        bail!(
            "no store at {}: give the data directory `runway server` runs with (--data-dir, or \
             api.data_dir in --config)",
            path.display()
        );
    }
    let store = config.store.open(&config.api.data_dir)?;
    let (token, revoked) =
        runway_api::recover_admin(store.as_ref()).context("cannot create an admin token")?;
    Ok((token.expose().to_owned(), revoked))
}
