//! Rules the schema cannot say: relations between fields, name syntax, quantities, and the
//! environment variables of `.runway/env-<env>.yml`.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::diagnostic::{Diagnostic, dotted_path};
use crate::quantity::Quantity;
use crate::source::SpanMap;
use crate::types::{
    APDEX_TOLERATING_FACTOR, ApiVersion, BackendProtocol, Build, DEFAULT_MAX_INSTANCES,
    LoadBalancer, Manifest, Percent, Slo, Spec, Workload, WorkloadKind, apdex_thresholds,
};

/// Environment variable names the platform sets itself.
pub const RESERVED_ENV: [&str; 5] = [
    "PORT",
    "K_SERVICE",
    "K_REVISION",
    "K_CONFIGURATION",
    "RUNWAY_IDENTITY_TOKEN_FILE",
];

/// The variables of one `.runway/env-<env>.yml`, with where each was written.
#[derive(Debug, Clone, Default)]
pub struct EnvFile {
    /// Name to value.
    pub vars: BTreeMap<String, String>,
    /// Locations, by pointer `/NAME`.
    pub spans: SpanMap,
}

struct Checker<'a> {
    spans: &'a SpanMap,
    out: Vec<Diagnostic>,
}

/// A finding just recorded, to which what was expected can be added.
struct Finding<'a>(&'a mut Diagnostic);

impl Finding<'_> {
    fn expected(self, expected: impl Into<String>) {
        self.0.expected = Some(expected.into());
    }
}

impl Checker<'_> {
    fn push(&mut self, diagnostic: Diagnostic) -> Finding<'_> {
        self.out.push(diagnostic);
        let last = self.out.len() - 1;
        Finding(&mut self.out[last])
    }

    fn error(&mut self, pointer: &str, message: impl Into<String>) -> Finding<'_> {
        self.push(Diagnostic::error(
            self.spans.value_location(pointer),
            dotted_path(pointer),
            message,
        ))
    }

    fn key_error(&mut self, pointer: &str, message: impl Into<String>) -> Finding<'_> {
        self.push(Diagnostic::error(
            self.spans.key_location(pointer),
            dotted_path(pointer),
            message,
        ))
    }

    fn warning(&mut self, pointer: &str, message: impl Into<String>) -> Finding<'_> {
        self.push(Diagnostic::warning(
            self.spans.value_location(pointer),
            dotted_path(pointer),
            message,
        ))
    }
}

/// Checks the rules beyond the schema on a manifest that has passed it.
pub(crate) fn check(
    manifest: &Manifest,
    spans: &SpanMap,
    env_file: Option<&EnvFile>,
) -> Vec<Diagnostic> {
    let mut c = Checker {
        spans,
        out: Vec::new(),
    };
    let spec = &manifest.spec;

    if manifest.api_version == ApiVersion::V1Beta {
        c.warning(
            "/apiVersion",
            "`runway/v1.0.0-beta` is the old name of this format",
        )
        .expected("`runway/v1`");
    }
    check_name(&mut c, &manifest.metadata.name);

    if let Some(regions) = &spec.regions {
        let mut seen = HashSet::new();
        for (i, region) in regions.iter().enumerate() {
            if !seen.insert(region) {
                c.error(
                    &format!("/spec/regions/{i}"),
                    format!("region `{region}` is listed twice"),
                )
                .expected("each region once");
            }
        }
    }

    runtime_support(&mut c, spec);

    if let Some(limits) = spec.resources.as_ref().and_then(|r| r.limits.as_ref()) {
        if let Some(cpu) = &limits.cpu {
            quantity(
                &mut c,
                "/spec/resources/limits/cpu",
                cpu,
                Quantity::cpu_millis,
                "a CPU quantity such as `1000m`, `2` or `0.5`",
            );
        }
        if let Some(memory) = &limits.memory {
            quantity(
                &mut c,
                "/spec/resources/limits/memory",
                memory,
                Quantity::bytes,
                "a memory quantity such as `512Mi`, `2Gi` or `8G`",
            );
        }
    }
    if spec.request_based_billing == Some(false) {
        let limits = spec.resources.as_ref().and_then(|r| r.limits.as_ref());
        let cpu = limits
            .and_then(|l| l.cpu.as_ref())
            .and_then(|q| q.cpu_millis().ok())
            .unwrap_or(1000);
        let memory = limits
            .and_then(|l| l.memory.as_ref())
            .and_then(|q| q.bytes().ok())
            .unwrap_or(512 << 20);
        if cpu < 1000 || memory < 512 << 20 {
            c.error(
                "/spec/request_based_billing",
                "instance-based billing needs at least 1000m CPU and 512Mi memory",
            )
            .expected("`true`, or larger resources.limits");
        }
    }

    if let Some(s) = &spec.scalability {
        let min = s.min_instances.unwrap_or(0);
        let max = s.max_instances.unwrap_or(DEFAULT_MAX_INSTANCES);
        if min > max {
            let message = match s.max_instances {
                Some(_) => format!("min_instances ({min}) is greater than max_instances ({max})"),
                None => format!(
                    "min_instances ({min}) is greater than the default max_instances ({max})"
                ),
            };
            c.error("/spec/scalability/min_instances", message)
                .expected(format!("at most {max}"));
        }
    }

    for (key, probe) in [
        ("startup_probe", &spec.startup_probe),
        ("liveness_probe", &spec.liveness_probe),
    ] {
        if let Some(probe) = probe {
            if probe.path.is_some() && probe.grpc_service.is_some() {
                c.error(
                    &format!("/spec/{key}/grpc_service"),
                    "a probe checks either an HTTP path or a gRPC service, not both",
                );
            }
            probe_path(&mut c, &format!("/spec/{key}/path"), probe.path.as_deref());
        }
    }
    if let Some(probe) = &spec.readiness_probe {
        probe_path(&mut c, "/spec/readiness_probe/path", probe.path.as_deref());
    }

    if let Some(d) = &spec.deployment {
        if let Some(p) = &d.rollout_traffic_percentages {
            percentages(&mut c, "/spec/deployment/rollout_traffic_percentages", p);
        }
        if let Some(p) = &d.traffic_rollout_percentages {
            percentages(&mut c, "/spec/deployment/traffic_rollout_percentages", p);
        }
        if let (Some(a), Some(b)) = (
            &d.rollout_traffic_percentages,
            &d.traffic_rollout_percentages,
        ) && a != b
        {
            c.error(
                "/spec/deployment/traffic_rollout_percentages",
                "both spellings of the rollout percentages are set, to different lists",
            )
            .expected("only `rollout_traffic_percentages`");
        }
    }

    if let Some(o) = &spec.observability {
        for (i, target) in o.scrape_targets.iter().flatten().enumerate() {
            let valid = target.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !valid {
                c.error(
                    &format!("/spec/observability/scrape_targets/{i}"),
                    format!("`{target}` is not an address"),
                )
                .expected("`host:port`, e.g. `localhost:8082`");
            }
        }
        if let Some(path) = &o.metrics_path
            && !path.starts_with('/')
        {
            c.error(
                "/spec/observability/metrics_path",
                format!("`{path}` is not an absolute path"),
            )
            .expected("a path starting with `/`");
        }
    }

    if let Some(image) = &spec.image {
        image_reference(&mut c, "/spec/image", image);
    }

    let workload = spec.workload.clone().unwrap_or_default();
    if let Some(process) = &workload.process {
        for field in ["image", "command", "args"] {
            let set = match field {
                "image" => spec.image.is_some(),
                "command" => spec.command.is_some(),
                _ => spec.args.is_some(),
            };
            if set {
                c.error(&format!("/spec/{field}"), format!("`spec.{field}` is for container images, and `spec.workload.process` runs a plain process"))
                    .expected("one artifact: either a container image or a process");
            }
        }
        if process.command.first().is_some_and(|p| p.trim().is_empty()) {
            c.error("/spec/workload/process/command/0", "the program is empty")
                .expected("a program name or path");
        }
    }
    if let Some(build) = &workload.build {
        check_build(&mut c, spec, &workload, build);
    }
    if workload.kind == Some(WorkloadKind::Worker) {
        for field in [
            "startup_probe",
            "liveness_probe",
            "readiness_probe",
            "load_balancing",
        ] {
            let set = match field {
                "startup_probe" => spec.startup_probe.is_some(),
                "liveness_probe" => spec.liveness_probe.is_some(),
                "readiness_probe" => spec.readiness_probe.is_some(),
                _ => spec.load_balancing.is_some(),
            };
            if set {
                c.error(
                    &format!("/spec/{field}"),
                    format!("a worker has no port, so `{field}` cannot apply"),
                )
                .expected("no probes or load balancing for `kind: worker`");
            }
        }
        if spec.container_port.is_some() {
            c.warning(
                "/spec/container_port",
                "a worker has no port; `container_port` is ignored",
            );
        }
    }

    // Rollout settings no strategy here uses are not refused: a per-environment file may
    // switch the strategy. Ranges (steps within 1..=100, pause at least 1, percents within
    // 0..=100, ratios at least 1, numbers finite) are the schema's.
    if let Some(steps) = workload.rollout.as_ref().and_then(|r| r.steps.as_ref()) {
        percentages(&mut c, "/spec/workload/rollout/steps", steps);
    }

    if let Some(slo) = &workload.slo {
        check_slo(&mut c, slo);
    }

    if let Some(egress) = &workload.egress {
        for (list, rules) in [("allow", &egress.allow), ("deny", &egress.deny)] {
            for (i, rule) in rules.iter().flatten().enumerate() {
                let pointer = format!("/spec/workload/egress/{list}/{i}");
                match rule.parse::<crate::egress::Rule>() {
                    Err(why) => {
                        c.error(&pointer, format!("`{rule}` is not an egress rule: {why}"))
                            .expected("an IPv4 range with an optional port or port range, e.g. `10.20.0.0/16:5432`");
                    }
                    Ok(parsed) if list == "allow" => {
                        if let Some(never) = crate::egress::never_reached(parsed.range) {
                            c.error(
                                &pointer,
                                format!("`{rule}` overlaps {never}, which no instance may reach"),
                            )
                            .expected(
                                "a range outside loopback, link-local, multicast and 0.0.0.0/8",
                            );
                        }
                    }
                    Ok(_) => {}
                }
            }
            let parsed: Vec<crate::egress::Rule> = rules
                .iter()
                .flatten()
                .filter_map(|r| r.parse().ok())
                .collect();
            if let Some((a, b)) = crate::egress::overlapping(&parsed) {
                c.error(
                    &format!("/spec/workload/egress/{list}"),
                    format!("`{a}` and `{b}` share addresses and ports"),
                )
                .expected("rules that do not overlap: write them as one");
            }
        }
    }
    if let Some(callers) = &workload.callers {
        for (i, caller) in callers.iter().enumerate() {
            let (service, env) = match caller.split_once('/') {
                Some((service, env)) => (service, Some(env)),
                None => (caller.as_str(), None),
            };
            let label = |s: &str| {
                !s.is_empty()
                    && s.len() <= 63
                    && s.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                    })
            };
            if !label(service) || !env.is_none_or(label) {
                c.error(
                    &format!("/spec/workload/callers/{i}"),
                    format!("`{caller}` is not a service's name"),
                )
                .expected("a service's name, or `service/environment`, in lower case");
            }
        }
    }

    if let Some(name) = &workload.tag_header {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let lower = name.to_ascii_lowercase();
        if !token {
            c.error(
                "/spec/workload/tag_header",
                format!("`{name}` is not an HTTP header's name"),
            )
            .expected("a header name such as `Runway-Tag`: letters, digits and `-`");
        } else if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-forwarded-") {
            c.error(
                "/spec/workload/tag_header",
                format!("`{name}` is a header the platform or HTTP itself uses"),
            )
            .expected("a header of the service's own, such as `Runway-Tag`");
        }
    }

    if let Some(audience) = workload
        .identity
        .as_ref()
        .and_then(|i| i.audience.as_deref())
        && (audience.is_empty()
            || audience.len() > 256
            || audience
                .chars()
                .any(|ch| ch.is_whitespace() || ch.is_control()))
    {
        c.error(
            "/spec/workload/identity/audience",
            format!("`{audience}` is not an audience a token can name"),
        )
        .expected("a name or URL of at most 256 characters, without spaces");
    }

    if let Some(limit) = &workload.rate_limit {
        if limit.requests_per_second.is_none() && limit.per_client.is_none() {
            c.error(
                "/spec/workload/rate_limit",
                "`rate_limit` limits nothing".to_owned(),
            )
            .expected("`requests_per_second`, `per_client`, or both");
        }
        if limit.burst.is_some() && limit.requests_per_second.is_none() {
            c.error(
                "/spec/workload/rate_limit/burst",
                "`burst` without `requests_per_second`".to_owned(),
            )
            .expected("`requests_per_second` beside it (a client's burst goes in `per_client`)");
        }
    }
    if let Some(addresses) = &workload.client_addresses {
        for (list, networks) in [("allow", &addresses.allow), ("deny", &addresses.deny)] {
            for (i, network) in networks.iter().flatten().enumerate() {
                if let Err(why) = crate::egress::client_network(network) {
                    c.error(
                        &format!("/spec/workload/client_addresses/{list}/{i}"),
                        format!("`{network}` is not a network: {why}"),
                    )
                    .expected("an IPv4 or IPv6 network or address, e.g. `203.0.113.0/24` or `2001:db8::/32`");
                }
            }
        }
        if addresses.allow.as_ref().is_some_and(Vec::is_empty) {
            c.error(
                "/spec/workload/client_addresses/allow",
                "an empty `allow` would admit no client".to_owned(),
            )
            .expected("at least one network, or no `allow` to admit every client");
        }
    }

    // Environment variables and secrets share one namespace: the process's environment.
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    for name in workload.env.iter().flatten().map(|(k, _)| k) {
        let pointer = format!(
            "/spec/workload/env/{}",
            crate::diagnostic::pointer_segment(name)
        );
        env_name(&mut c, &pointer, name);
        names.insert(name, pointer);
    }
    if let Some(file) = env_file {
        let mut file_checker = Checker {
            spans: &file.spans,
            out: Vec::new(),
        };
        for name in file.vars.keys() {
            env_name(
                &mut file_checker,
                &format!("/{}", crate::diagnostic::pointer_segment(name)),
                name,
            );
        }
        c.out.append(&mut file_checker.out);
    }
    let mut secrets_seen = HashSet::new();
    let mut suffixes: HashMap<String, &str> = HashMap::new();
    for (i, secret) in workload.secrets.iter().flatten().enumerate() {
        let pointer = format!("/spec/workload/secrets/{i}");
        if !is_secret_name(secret) {
            c.error(&pointer, format!("`{secret}` is not a valid secret name"))
                .expected("upper-case letters, digits and `_`, starting with a letter");
        } else if RESERVED_ENV.contains(&secret.as_str()) || secret.starts_with("K_") {
            c.error(&pointer, format!("`{secret}` is set by the platform"))
                .expected(format!(
                    "a name other than {} and K_*",
                    RESERVED_ENV.join(", ")
                ));
        } else if secret == "PATH" || secret.starts_with("LD_") {
            c.error(
                &pointer,
                format!("`{secret}` decides which code the instance runs, not a secret's place"),
            )
            .expected("a name other than PATH and LD_*");
        }
        if !secrets_seen.insert(secret) {
            c.error(&pointer, format!("secret `{secret}` is listed twice"));
        } else if let Some(first) = suffixes.insert(crate::config::secret_suffix(secret), secret) {
            c.error(
                &pointer,
                format!(
                    "secret `{secret}` would share its Kubernetes Secret with `{first}` (both \
                     are `{}`)",
                    crate::config::secret_suffix(secret)
                ),
            )
            .expected("names that differ in more than trailing `_`");
        }
        let in_file = env_file.is_some_and(|f| f.vars.contains_key(secret));
        if names.contains_key(secret.as_str()) || in_file {
            let source = if in_file {
                "the environment file"
            } else {
                "spec.workload.env"
            };
            c.error(&pointer, format!("secret `{secret}` clashes with an environment variable of the same name in {source}"))
                .expected("a secret or a variable, not both");
        }
    }
    c.out
}

/// Upstream's fields that Runway's runtimes accept but do not do (`docs/upstream-fields.md`):
/// each is a warning at the field, never an error, so upstream's files stay valid. What they
/// say holds for the local runtime and, unless it names `runway render -t knative`, for
/// Kubernetes too.
fn runtime_support(c: &mut Checker<'_>, spec: &Spec) {
    let mut regions: Vec<&String> = Vec::new();
    for region in spec.regions.iter().flatten() {
        if !regions.contains(&region) {
            regions.push(region);
        }
    }
    if let [_, second, rest @ ..] = regions.as_slice()
        && let Some(i) = spec.regions.iter().flatten().position(|r| r == *second)
    {
        let more = match rest.len() {
            0 => String::new(),
            n => format!(" (and {n} more)"),
        };
        c.warning(
            &format!("/spec/regions/{i}"),
            format!(
                "the platform runs the service once, not once per region: `{second}`{more} gets \
                 no instances of its own"
            ),
        )
        .expected("one region");
    }

    if let Some(resources) = &spec.resources
        && resources.startup_cpu_boost == Some(true)
    {
        c.warning(
            "/spec/resources/startup_cpu_boost",
            "instances have `resources.limits.cpu` from their start, with no boost; only \
             `runway render -t knative` carries it, for Cloud Run",
        );
    }

    if spec.request_based_billing == Some(true) {
        c.warning(
            "/spec/request_based_billing",
            "instances keep their CPU between requests: it is not throttled as on Cloud Run; \
             only `runway render -t knative` carries it",
        );
    }

    match spec.execution_environment.as_deref() {
        None | Some("EXECUTION_ENVIRONMENT_GEN2") => {}
        Some("EXECUTION_ENVIRONMENT_GEN1") => {
            c.warning(
                "/spec/execution_environment",
                "instances run as full Linux containers or processes, as the second generation \
                 does, not in the first generation's sandbox; only `runway render -t knative` \
                 carries it",
            );
        }
        Some(other) => {
            c.warning(
                "/spec/execution_environment",
                format!("`{other}` is not an execution environment, and is not used"),
            )
            .expected("`EXECUTION_ENVIRONMENT_GEN1` or `EXECUTION_ENVIRONMENT_GEN2`");
        }
    }

    if let Some(vpc) = &spec.vpc_access
        && let Some(egress) = &vpc.egress
    {
        let pointer = "/spec/vpc_access/egress";
        let expected = "`PRIVATE_RANGES_ONLY` or `ALL_TRAFFIC`";
        match egress.to_ascii_lowercase().replace('_', "-").as_str() {
            _ if vpc.enabled != Some(true) => {
                c.warning(
                    pointer,
                    "`vpc_access.enabled` is not true, so `egress` has no effect",
                );
            }
            "private-ranges-only" => {}
            "all-traffic" => {
                c.warning(
                    pointer,
                    "instances reach the operator's private ranges, as with \
                     `PRIVATE_RANGES_ONLY`, but their internet traffic leaves through the host's \
                     NAT, not through the private network",
                );
            }
            _ => {
                c.warning(
                    pointer,
                    format!("`{egress}` is not an egress setting; read as `PRIVATE_RANGES_ONLY`"),
                )
                .expected(expected);
            }
        }
    }

    let protocol = |lb: Option<&LoadBalancer>| lb.and_then(|lb| lb.backend_protocol);
    let lb = spec.load_balancing.as_ref();
    let external_off = lb
        .and_then(|lb| lb.external_load_balancer.as_ref())
        .is_some_and(|lb| lb.enabled == Some(false));
    // With the external entry point off, the internal one's protocol is the service's.
    if let (false, Some(external), Some(internal)) = (
        external_off,
        protocol(lb.and_then(|lb| lb.external_load_balancer.as_ref())),
        protocol(lb.and_then(|lb| lb.internal_load_balancer.as_ref())),
    ) && external.is_http2() != internal.is_http2()
    {
        let name = |p: BackendProtocol| {
            serde_json::to_value(p)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        c.warning(
            "/spec/load_balancing/internal_load_balancer/backend_protocol",
            format!(
                "a service has one protocol, the external load balancer's (`{}`), so `{}` is \
                 not used",
                name(external),
                name(internal)
            ),
        )
        .expected(format!(
            "the external load balancer's protocol, `{}`",
            name(external)
        ));
    }

    let targets = spec
        .observability
        .as_ref()
        .and_then(|o| o.scrape_targets.as_ref());
    for (i, target) in targets.into_iter().flatten().enumerate() {
        let Some((host, port)) = target.rsplit_once(':') else {
            continue; // not an address: an error above
        };
        let own = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified());
        if !own && !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) {
            c.warning(
                &format!("/spec/observability/scrape_targets/{i}"),
                format!(
                    "scraped at the instance's own address on port {port}; the host `{host}` is \
                     not used"
                ),
            )
            .expected(format!("`localhost:{port}`"));
        }
    }
}

/// The objectives' rules beyond the schema's ranges: a threshold the ingress's histogram can
/// measure, and a runbook a browser can open.
fn check_slo(c: &mut Checker<'_>, slo: &Slo) {
    if let Some(threshold) = slo.apdex_threshold_seconds
        && threshold > 0.0
        && !apdex_thresholds().any(|bound| bound == threshold)
    {
        let bounds: Vec<String> = apdex_thresholds().map(|b| b.to_string()).collect();
        c.error(
            "/spec/workload/slo/apdex_threshold_seconds",
            format!(
                "{threshold} seconds is not a bound of the ingress's latency histogram, so its \
                 apdex cannot be measured"
            ),
        )
        .expected(format!(
            "one of {} (a bound whose {APDEX_TOLERATING_FACTOR} times, the tolerating bound, is \
             one too)",
            bounds.join(", ")
        ));
    }
    if let Some(url) = &slo.runbook_url {
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"));
        let host_present = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
        if !host_present || url.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
            c.error(
                "/spec/workload/slo/runbook_url",
                format!("`{url}` is not a web address"),
            )
            .expected("an `http://` or `https://` URL, e.g. `https://runbooks.example.com/web`");
        }
    }
}

fn check_name(c: &mut Checker<'_>, name: &str) {
    let pointer = "/metadata/name";
    let expected = "a DNS label: lower-case letters, digits and `-`, starting with a letter";
    if name.is_empty() {
        return; // the schema's minLength has said so
    }
    let bad = name
        .chars()
        .find(|ch| !(ch.is_ascii_lowercase() || ch.is_ascii_digit() || *ch == '-' || *ch == '_'));
    if let Some(ch) = bad {
        let hint = if ch.is_ascii_uppercase() {
            " (names are lower-case)"
        } else {
            ""
        };
        c.error(pointer, format!("`{name}` contains `{ch}`{hint}"))
            .expected(expected);
    } else if !name.starts_with(|ch: char| ch.is_ascii_lowercase()) {
        c.error(pointer, format!("`{name}` does not start with a letter"))
            .expected(expected);
    } else if name.ends_with(['-', '_']) {
        c.error(
            pointer,
            format!("`{name}` ends with `{}`", &name[name.len() - 1..]),
        )
        .expected(expected);
    } else if name.contains('_') {
        c.warning(
            pointer,
            format!(
                "`{name}` is not a DNS label; host names and object names use `{}`",
                crate::config::dns_name(name)
            ),
        );
    }
}

fn quantity(
    c: &mut Checker<'_>,
    pointer: &str,
    q: &Quantity,
    parse: fn(&Quantity) -> Result<u64, crate::quantity::QuantityError>,
    expected: &str,
) {
    match parse(q) {
        Ok(0) => {
            c.error(pointer, format!("`{q}` is zero"))
                .expected(expected);
        }
        Ok(_) => {}
        Err(e) => {
            c.error(pointer, format!("`{q}` does not parse: {e}"))
                .expected(expected);
        }
    }
}

fn probe_path(c: &mut Checker<'_>, pointer: &str, path: Option<&str>) {
    if let Some(path) = path
        && !path.starts_with('/')
    {
        c.error(pointer, format!("`{path}` is not an absolute path"))
            .expected("a path starting with `/`");
    }
}

fn percentages(c: &mut Checker<'_>, pointer: &str, steps: &[Percent]) {
    let expected = "strictly increasing percentages from 1 to 100, ending at 100";
    for (i, pair) in steps.windows(2).enumerate() {
        if pair[1] <= pair[0] {
            c.error(
                &format!("{pointer}/{}", i + 1),
                format!("{} does not increase on {}", pair[1], pair[0]),
            )
            .expected(expected);
        }
    }
    for (i, step) in steps.iter().enumerate() {
        if *step == 0 || *step > 100 {
            c.error(
                &format!("{pointer}/{i}"),
                format!("{step} is not a percentage"),
            )
            .expected(expected);
        }
    }
    match steps.last() {
        Some(100) => {}
        Some(last) => {
            c.error(
                &format!("{pointer}/{}", steps.len() - 1),
                format!("the last step is {last}"),
            )
            .expected(expected);
        }
        None => {
            c.error(pointer, "the list is empty").expected(expected);
        }
    }
}

/// Headers `spec.workload.tag_header` cannot name: HTTP's own, and those the platform sets or
/// reads (the ingress stamps `Runway-Caller` and request ids, passes Cloudflare's client).
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "content-type",
    "cookie",
    "authorization",
    "forwarded",
    "x-request-id",
    "runway-caller",
    "cf-connecting-ip",
];

/// Whether an image reference is pinned by its digest: `…@sha256:<64 lower-case hex>`.
pub fn is_pinned(reference: &str) -> bool {
    reference.rsplit_once("@sha256:").is_some_and(|(_, hex)| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `spec.workload.build`: one artifact, a base pinned by digest, a program, paths inside the
/// repository and the image.
fn check_build(c: &mut Checker<'_>, spec: &Spec, workload: &Workload, build: &Build) {
    let at = "/spec/workload/build";
    if workload.process.is_some() {
        c.error(
            at,
            "`spec.workload.build` builds an image, and `spec.workload.process` runs a plain process",
        )
        .expected("one artifact: a process, a built image or an image");
    }
    for (field, set) in [
        ("image", spec.image.is_some()),
        ("command", spec.command.is_some()),
        ("args", spec.args.is_some()),
    ] {
        if set {
            c.error(
                &format!("/spec/{field}"),
                format!(
                    "`spec.{field}` names an image of its own, and `spec.workload.build` builds one"
                ),
            )
            .expected("the command in `spec.workload.build.command`, or no `build`");
        }
    }
    let pinned = is_pinned(&build.base);
    if !build.base.trim().is_empty() {
        image_reference(c, &format!("{at}/base"), &build.base);
        if !pinned {
            c.error(
                &format!("{at}/base"),
                format!("`{}` is not pinned by its digest", build.base),
            )
            .expected(
                "`registry/repository@sha256:<64 hex>`, so a build cannot change under you \
                 (`skopeo inspect docker://IMAGE` prints the digest)",
            );
        }
    }
    if build.command.first().is_some_and(|p| p.trim().is_empty()) {
        c.error(&format!("{at}/command/0"), "the program is empty")
            .expected("a program name or path in the base image");
    }
    if let Some(workdir) = &build.workdir
        && (!workdir.starts_with('/') || workdir.split('/').any(|part| part == ".."))
    {
        c.error(
            &format!("{at}/workdir"),
            format!("`{workdir}` is not an absolute path"),
        )
        .expected("a directory in the image, e.g. `/app`");
    }
    for (i, path) in build.include.iter().flatten().enumerate() {
        let outside = path.starts_with('/')
            || std::path::Path::new(path)
                .components()
                .any(|part| matches!(part, std::path::Component::ParentDir));
        if path.trim().is_empty() || outside {
            c.error(
                &format!("{at}/include/{i}"),
                format!("`{path}` is not a path inside the repository"),
            )
            .expected("a file or directory relative to the directory holding `.runway/`");
        }
    }
}

fn image_reference(c: &mut Checker<'_>, pointer: &str, image: &str) {
    const EXPECTED: &str =
        "`registry/repository:tag` or `…@sha256:…`, the repository in lower case";
    if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
        c.error(pointer, format!("`{image}` is not an image reference"))
            .expected(EXPECTED);
    } else if image.contains('$') {
        c.warning(pointer, format!("`{image}` holds an unexpanded variable and is used as written; pass the image with `runway deploy --image`"));
    } else if let Err(e) = image.parse::<oci_spec::distribution::Reference>() {
        c.error(pointer, format!("`{image}` is not an image reference: {e}"))
            .expected(EXPECTED);
    }
}

fn env_name(c: &mut Checker<'_>, pointer: &str, name: &str) {
    let valid = name.starts_with(|ch: char| ch.is_ascii_alphabetic() || ch == '_')
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
    if !valid {
        c.key_error(
            pointer,
            format!("`{name}` is not a valid environment variable name"),
        )
        .expected("letters, digits and `_`, not starting with a digit");
    } else if RESERVED_ENV.contains(&name) {
        c.key_error(pointer, format!("`{name}` is set by the platform"))
            .expected(format!("a name other than {}", RESERVED_ENV.join(", ")));
    }
}

/// Whether `name` follows upstream's rule for secret names: upper-case letters, digits and
/// underscores, starting with a letter.
pub fn is_secret_name(name: &str) -> bool {
    name.starts_with(|ch: char| ch.is_ascii_uppercase())
        && name
            .chars()
            .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_')
}
