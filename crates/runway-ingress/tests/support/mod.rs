//! What several of the ingress's test binaries share.

use std::net::SocketAddr;

use runway_ingress::{InstanceConfig, RevisionConfig, RouteConfig, RouteTableConfig};

/// A table of one route, `hello.dev.localhost`, to one ready instance at `instance`.
pub(crate) fn one_route(instance: SocketAddr) -> RouteTableConfig {
    RouteTableConfig {
        domain: "localhost".to_owned(),
        routes: vec![RouteConfig {
            service: "hello".to_owned(),
            env: "dev".to_owned(),
            domains: Vec::new(),
            request_timeout_seconds: 5.0,
            sticky: false,
            revisions: vec![RevisionConfig {
                name: "hello-1".to_owned(),
                weight: 100,
                tag: None,
                average_start_seconds: None,
                protocol: runway_ingress::config::Protocol::Http1,
                failing: false,
                instances: vec![InstanceConfig {
                    address: instance,
                    ready: true,
                    draining: false,
                    max_concurrency: 0,
                }],
            }],
            cells: None,
            public: true,
            private: false,
            callers: Vec::new(),
            cloudflare: false,
            tag_header: None,
            controls: Default::default(),
        }],
        ..RouteTableConfig::default()
    }
}
