//! Custom domains: `GET`/`POST /v1/domains`, `DELETE /v1/domains/{domain}`.
//!
//! A domain maps a name to a service's environment; the ingress routes it and serves its
//! certificate by SNI, obtained from the server's ACME directory (`domains.acme`) or given by
//! the operator. Mapping a name is an admin's act: a tenant's deploy token may list its own
//! service's domains, but cannot claim a name (another tenant's, or the platform's own).

use axum::http::StatusCode;

use runway_secrets::{Env, Need, Role};

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};
use crate::state::ApiState;
use crate::types::{AddDomain, DomainView};

/// What the API needs to know of the server's custom-domain set-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainSettings {
    /// The ACME directory certificates come from; none when the server has no `domains.acme`.
    pub acme_directory: Option<String>,
    /// Names a custom domain may neither be nor be under: the services' own domain
    /// (`localhost`), the API's host names.
    pub reserved: Vec<String>,
    /// The ingress's HTTPS port, for the domain's URL.
    pub https_port: u16,
}

impl DomainSettings {
    fn url(&self, domain: &str) -> String {
        match self.https_port {
            443 | 0 => format!("https://{domain}/"),
            port => format!("https://{domain}:{port}/"),
        }
    }

    fn view(&self, domain: runway_store::Domain) -> DomainView {
        let url = self.url(&domain.name);
        let mut view = DomainView::new(domain, url);
        if view.state == "pending" && self.acme_directory.is_none() {
            view.detail = Some(
                "no certificate is ordered: the server has no ACME directory (domains.acme); \
                 an operator's certificate for it, if any, is served, else the local \
                 authority's"
                    .to_owned(),
            );
        }
        view
    }
}

/// `name` as a custom domain: lower-cased, without a final dot; 400 naming `domain` when it is
/// not a DNS name of at least two labels (each 1 to 63 letters, digits and inner `-`, 253 at
/// most in all), is a wildcard or an address, or is (or is under) one of `reserved`.
pub fn check_domain(name: &str, reserved: &[String]) -> ApiResult<String> {
    let invalid = |why: String| Err(ApiError::invalid(why).field("domain"));
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.starts_with("*.") {
        return invalid(format!(
            "{name:?} is a wildcard: a certificate is obtained with an HTTP or TLS challenge, \
             which cannot prove a wildcard; add each name"
        ));
    }
    let labels: Vec<&str> = name.split('.').collect();
    let label_ok = |label: &&str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() > 253 || labels.len() < 2 || !labels.iter().all(label_ok) {
        return invalid(format!(
            "{name:?} is not a domain name: expected labels of letters, digits and inner `-` \
             (1 to 63 each), at least two (www.example.com), 253 characters at most"
        ));
    }
    if labels.iter().all(|l| l.bytes().all(|b| b.is_ascii_digit())) {
        return invalid(format!("{name:?} is an address, not a domain name"));
    }
    if let Some(own) = reserved
        .iter()
        .map(|r| r.trim_end_matches('.').to_ascii_lowercase())
        .find(|r| name == *r || name.ends_with(&format!(".{r}")))
    {
        return invalid(format!(
            "{name:?} is the platform's own ({own}): services are reached there already"
        ));
    }
    Ok(name)
}

/// Every custom domain the caller may see (those of the services it has a role on).
#[utoipa::path(get, path = "/v1/domains", responses((status = 200, body = Vec<DomainView>)))]
pub(crate) async fn list_domains(
    caller: Caller,
    state: axum::extract::State<ApiState>,
) -> ApiResult<axum::Json<Vec<DomainView>>> {
    let settings = state.platform.domains();
    let domains = state.store(|s| Ok(s.domain_list()?)).await?;
    Ok(axum::Json(
        domains
            .into_iter()
            .filter(|d| caller.shows(&d.service, Env::One(&d.env)))
            .map(|d| settings.view(d))
            .collect(),
    ))
}

/// Routes a custom domain to a service's environment and orders its certificate (a
/// maintainer of that environment).
#[utoipa::path(post, path = "/v1/domains", request_body = AddDomain,
    responses((status = 201, body = DomainView)))]
pub(crate) async fn add_domain(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Json(body): Json<AddDomain>,
) -> ApiResult<(StatusCode, axum::Json<DomainView>)> {
    caller.allow(&body.service, Env::One(&body.env))?;
    let settings = state.platform.domains();
    let name = check_domain(&body.domain, &settings.reserved)?;
    let (actor, admin) = (caller.name.clone(), caller.is_admin());
    let (service, env) = (body.service, body.env);
    let added = state
        .store(move |s| {
            let found = s.service_get(&service).map_err(|e| match e {
                runway_store::StoreError::NotFound { .. } => {
                    ApiError::not_found(format!("service {service:?} not found")).field("service")
                }
                other => other.into(),
            })?;
            if !found.environments.contains(&env) {
                return Err(ApiError::not_found(format!(
                    "service {service:?} has no environment {env:?} (it has {})",
                    found.environments.join(", ")
                ))
                .field("env"));
            }
            s.domain_add(&actor, &name, &service, &env)
                .map_err(|e| match e {
                    // Whose it is is an admin's to know, not another tenant's.
                    runway_store::StoreError::Conflict(_) if !admin => {
                        ApiError::conflict(format!("{name} is routed to another service already"))
                            .field("domain")
                    }
                    other => other.into(),
                })
        })
        .await?;
    state.platform.edge_changed();
    Ok((StatusCode::CREATED, axum::Json(settings.view(added))))
}

/// Removes a custom domain and its certificate (a maintainer of its service's environment).
#[utoipa::path(delete, path = "/v1/domains/{domain}", params(("domain" = String, Path)),
    responses((status = 204)))]
pub(crate) async fn remove_domain(
    caller: Caller,
    state: axum::extract::State<ApiState>,
    Path(domain): Path<String>,
) -> ApiResult<StatusCode> {
    let actor = caller.name.clone();
    let name = domain.trim_end_matches('.').to_ascii_lowercase();
    let not_found = || ApiError::not_found(format!("domain {name:?} not found"));
    let domains = state.store(|s| Ok(s.domain_list()?)).await?;
    // Another service's domain is not found by whoever may not see that service.
    let found = domains
        .into_iter()
        .find(|d| d.name == name)
        .filter(|d| {
            caller
                .check(Need::Role(Role::Viewer), Some(&d.service), Env::One(&d.env))
                .is_ok()
        })
        .ok_or_else(not_found)?;
    caller.allow(&found.service, Env::One(&found.env))?;
    let gone = not_found();
    state
        .store(move |s| {
            s.domain_remove(&actor, &name).map_err(|e| match e {
                runway_store::StoreError::NotFound { .. } => gone,
                other => other.into(),
            })
        })
        .await?;
    state.platform.edge_changed();
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_domain_must_be_a_name_of_its_own() {
        let reserved = vec!["localhost".to_owned(), "api.runway.example".to_owned()];
        assert_eq!(
            check_domain("WWW.Example.com.", &reserved).unwrap(),
            "www.example.com"
        );
        for bad in [
            "*.example.com",
            "example",
            "exa_mple.com",
            "-a.example.com",
            "a..example.com",
            "127.0.0.1",
            "hello.dev.localhost",
            "localhost",
            "api.runway.example",
            "x.api.runway.example",
            &format!("{}.com", "a".repeat(64)),
            &format!("{}com", "a.".repeat(130)),
        ] {
            let error = check_domain(bad, &reserved).unwrap_err();
            let error = format!("{error:?}");
            assert!(error.contains(r#"field: Some("domain")"#), "{bad}: {error}");
        }
        // A name merely ending like a reserved one is not under it.
        assert!(check_domain("notlocalhost.com", &reserved).is_ok());
        assert!(check_domain("myapi.runway.example.org", &reserved).is_ok());
    }
}
