//! Preview environments' names: preview `mr-12` of service `app` is the service
//! `mr-12--app`, deployed to the one environment [`ENVIRONMENT`]. A service's own name never
//! holds [`SEPARATOR`], so the name alone says whose preview a service is: its parent's tokens
//! act on it, and it reads its parent's secrets for [`ENVIRONMENT`].

/// The environment every preview is deployed to, and its parent's secret set for previews.
pub const ENVIRONMENT: &str = "preview";

/// Between a preview's name and its parent's.
pub const SEPARATOR: &str = "--";

/// The service that is preview `preview` of `parent`.
#[must_use]
pub fn service_name(preview: &str, parent: &str) -> String {
    format!("{preview}{SEPARATOR}{parent}")
}

/// Whose preview `service` is, and its name: `("mr-12", "app")` for `mr-12--app`; `None`
/// for a service of its own.
#[must_use]
pub fn split(service: &str) -> Option<(&str, &str)> {
    service
        .split_once(SEPARATOR)
        .filter(|(name, parent)| !name.is_empty() && !parent.is_empty())
}

/// The service whose tokens act on `service` and whose secrets it reads: its parent for a
/// preview, else itself.
#[must_use]
pub fn owner(service: &str) -> &str {
    split(service).map_or(service, |(_, parent)| parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_names_its_parent_and_a_service_itself() {
        assert_eq!(service_name("mr-12", "app"), "mr-12--app");
        assert_eq!(split("mr-12--app"), Some(("mr-12", "app")));
        assert_eq!(owner("mr-12--app"), "app");
        assert_eq!(split("my-app"), None);
        assert_eq!(owner("my-app"), "my-app");
        assert_eq!(split("--app"), None);
        assert_eq!(split("mr--"), None);
    }
}
