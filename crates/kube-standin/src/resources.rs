//! The resources the stand-in serves, and the paths a client names them by.

use serde_json::{Value, json};

/// One API resource.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    /// "" for the core group.
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) plural: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) namespaced: bool,
    /// Has a status subresource: the main resource's writes leave `status` as it was.
    pub(crate) status: bool,
    /// Subresources besides `status`.
    pub(crate) subresources: &'static [&'static str],
    pub(crate) short_names: &'static [&'static str],
}

/// An index into [`RESOURCES`].
pub(crate) type ResId = usize;

pub(crate) const NAMESPACES: ResId = 0;
pub(crate) const PODS: ResId = 1;
pub(crate) const SERVICES: ResId = 2;
pub(crate) const SECRETS: ResId = 3;
pub(crate) const CONFIGMAPS: ResId = 4;
pub(crate) const EVENTS: ResId = 5;
pub(crate) const DEPLOYMENTS: ResId = 6;
pub(crate) const ENDPOINTSLICES: ResId = 7;
pub(crate) const NETWORKPOLICIES: ResId = 8;

pub(crate) const RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        status: true,
        subresources: &["finalize"],
        short_names: &["ns"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        status: true,
        subresources: &["log"],
        short_names: &["po"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        status: true,
        subresources: &[],
        short_names: &["svc"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        status: false,
        subresources: &[],
        short_names: &[],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        status: false,
        subresources: &[],
        short_names: &["cm"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        status: false,
        subresources: &[],
        short_names: &["ev"],
    },
    Resource {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        status: true,
        subresources: &["scale"],
        short_names: &["deploy"],
    },
    Resource {
        group: "discovery.k8s.io",
        version: "v1",
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        status: false,
        subresources: &[],
        short_names: &[],
    },
    Resource {
        group: "networking.k8s.io",
        version: "v1",
        plural: "networkpolicies",
        singular: "networkpolicy",
        kind: "NetworkPolicy",
        namespaced: true,
        status: false,
        subresources: &[],
        short_names: &["netpol"],
    },
];

impl Resource {
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, `pods`: how error messages name the resource.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Deployment.apps`, `Pod`: how validation errors name the kind.
    pub(crate) fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_owned()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

pub(crate) fn get(id: ResId) -> &'static Resource {
    &RESOURCES[id]
}

/// The resource with this group and plural, served at this version.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<ResId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource named by any of: its plural, singular, kind or short name, optionally
/// qualified by group (`deployments.apps`, `Deployment`, `apps/v1/Deployment`).
pub(crate) fn lookup(name: &str) -> Option<ResId> {
    let (prefix, last) = match name.rsplit_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    let (base, group) = match last.split_once('.') {
        Some((b, g)) => (b, Some(g)),
        None => (last, None),
    };
    let lower = base.to_ascii_lowercase();
    RESOURCES.iter().position(|r| {
        let named = r.plural == lower
            || r.singular == lower
            || r.kind.eq_ignore_ascii_case(base)
            || r.short_names.contains(&lower.as_str());
        let grouped = group.is_none_or(|g| g == r.group);
        let versioned = prefix.is_none_or(|p| p == r.api_version());
        named && grouped && versioned
    })
}

/// What a request path names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `/version`, `/healthz`, `/api`, `/apis`, `/api/v1`, `/apis/apps/v1`, ...
    Discovery(Discovery),
    /// A collection (`name` is None) or one object, maybe a subresource of it.
    Resource {
        res: ResId,
        /// None for all namespaces (or a cluster-scoped resource).
        namespace: Option<String>,
        name: Option<String>,
        subresource: Option<String>,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Discovery {
    Version,
    Health,
    CoreVersions,
    Groups,
    Resources { group: String, version: String },
}

/// What the path names, or None when it names nothing served (404).
pub(crate) fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Some(Target::Discovery(Discovery::Version)),
        ["healthz" | "livez" | "readyz", ..] => return Some(Target::Discovery(Discovery::Health)),
        ["api"] => return Some(Target::Discovery(Discovery::CoreVersions)),
        ["apis"] => return Some(Target::Discovery(Discovery::Groups)),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let served = RESOURCES
        .iter()
        .any(|r| r.group == group && r.version == version);
    if !served {
        return None;
    }
    let target = |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        let res = find(group, version, plural)?;
        let r = get(res);
        if namespace.is_some() && !r.namespaced {
            return None;
        }
        if !r.namespaced && name.is_none() && namespace.is_some() {
            return None;
        }
        if let Some(sub) = sub
            && sub != "status"
            && !r.subresources.contains(&sub)
        {
            return None;
        }
        Some(Target::Resource {
            res,
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
        })
    };
    let namespaced_in_group = |plural: &str| {
        RESOURCES
            .iter()
            .any(|r| r.group == group && r.version == version && r.plural == plural && r.namespaced)
    };
    match rest {
        [] => Some(Target::Discovery(Discovery::Resources {
            group: group.to_owned(),
            version: version.to_owned(),
        })),
        [plural] => target(plural, None, None, None),
        ["namespaces", ns, plural, rest @ ..] if namespaced_in_group(plural) => match rest {
            [] => target(plural, Some(ns), None, None),
            [name] => target(plural, Some(ns), Some(name), None),
            [name, sub] => target(plural, Some(ns), Some(name), Some(sub)),
            _ => None,
        },
        [plural, name] => target(plural, None, Some(name), None),
        [plural, name, sub] => target(plural, None, Some(name), Some(sub)),
        _ => None,
    }
}

/// `GET /version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-runway-standin",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `GET /api`.
pub(crate) fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}]
    })
}

/// `GET /apis`.
pub(crate) fn groups() -> Value {
    let mut names: Vec<&str> = RESOURCES
        .iter()
        .map(|r| r.group)
        .filter(|g| !g.is_empty())
        .collect();
    names.dedup();
    let groups: Vec<Value> = names
        .iter()
        .map(|g| {
            let gv = format!("{g}/v1");
            json!({
                "name": g,
                "versions": [{"groupVersion": gv, "version": "v1"}],
                "preferredVersion": {"groupVersion": gv, "version": "v1"}
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /api/v1`, `GET /apis/{group}/{version}`.
pub(crate) fn resource_list(group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut verbs = vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        if r.plural == "namespaces" {
            verbs.retain(|v| *v != "deletecollection");
        }
        list.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
            "shortNames": r.short_names,
        }));
        if r.status {
            list.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for sub in r.subresources {
            let (kind, group, version, verbs) = match *sub {
                "scale" => ("Scale", "autoscaling", "v1", vec!["get", "patch", "update"]),
                "log" => ("Pod", "", "", vec!["get"]),
                _ => (r.kind, "", "", vec!["update"]),
            };
            let mut entry = json!({
                "name": format!("{}/{}", r.plural, sub),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if !group.is_empty() {
                entry["group"] = json!(group);
                entry["version"] = json!(version);
            }
            list.push(entry);
        }
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn res(res: ResId, ns: Option<&str>, name: Option<&str>, sub: Option<&str>) -> Option<Target> {
        Some(Target::Resource {
            res,
            namespace: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
        })
    }

    #[test]
    fn paths() {
        assert_eq!(parse_path("/api/v1/pods"), res(PODS, None, None, None));
        assert_eq!(
            parse_path("/api/v1/namespaces/a/pods/b/log"),
            res(PODS, Some("a"), Some("b"), Some("log"))
        );
        assert_eq!(
            parse_path("/api/v1/namespaces"),
            res(NAMESPACES, None, None, None)
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/a"),
            res(NAMESPACES, None, Some("a"), None)
        );
        assert_eq!(
            parse_path("/api/v1/namespaces/a/status"),
            res(NAMESPACES, None, Some("a"), Some("status"))
        );
        assert_eq!(
            parse_path("/apis/apps/v1/namespaces/x/deployments/d/scale"),
            res(DEPLOYMENTS, Some("x"), Some("d"), Some("scale"))
        );
        assert_eq!(
            parse_path("/apis/apps/v1/deployments"),
            res(DEPLOYMENTS, None, None, None)
        );
        assert_eq!(parse_path("/apis/apps/v1/namespaces/x/replicasets"), None);
        assert_eq!(parse_path("/api/v1/namespaces/a/pods/b/exec"), None);
        assert_eq!(lookup("Deployment"), Some(DEPLOYMENTS));
        assert_eq!(lookup("apps/v1/Deployment"), Some(DEPLOYMENTS));
        assert_eq!(
            lookup("endpointslices.discovery.k8s.io"),
            Some(ENDPOINTSLICES)
        );
        assert_eq!(lookup("pods"), Some(PODS));
        assert_eq!(
            parse_path("/apis/networking.k8s.io/v1/namespaces/x/networkpolicies/p"),
            res(NETWORKPOLICIES, Some("x"), Some("p"), None)
        );
        assert_eq!(lookup("netpol"), Some(NETWORKPOLICIES));
    }
}
