//! What the real server does to a client's object before storing it: defaulting, the
//! per-kind preparation (a Service's cluster IP, a Secret's `stringData`, a new pod's status),
//! and the validation a driver can trip over.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::resources::{
    CONFIGMAPS, DEPLOYMENTS, ENDPOINTSLICES, EVENTS, NAMESPACES, NETWORKPOLICIES, PODS, ResId,
    SECRETS, SERVICES,
};
use crate::selector::LabelSelector;
use crate::util;

/// One validation failure, as a `Status` cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    pub(crate) reason: &'static str,
    /// `spec.selector`.
    pub(crate) field: String,
    /// `Required value`, `Invalid value: "x": why`.
    pub(crate) message: String,
}

impl Cause {
    pub(crate) fn required(field: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            reason: "FieldValueRequired",
            field: field.to_owned(),
            message,
        }
    }

    fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        Self {
            reason: "FieldValueInvalid",
            field: field.to_owned(),
            message: format!("Invalid value: {shown}: {detail}"),
        }
    }

    fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.to_owned(),
            message: format!("Forbidden: {detail}"),
        }
    }

    fn duplicate(field: &str, value: &Value) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.to_owned(),
            message: format!("Duplicate value: {value}"),
        }
    }
}

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    util::object_mut(util::object_mut(v).entry(key).or_insert_with(|| json!({})))
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_owned(), value);
    }
}

/// The real server's defaults (`SetDefaults_*`) for the fields a driver sees.
pub(crate) fn default(res: ResId, obj: &mut Value) {
    match res {
        DEPLOYMENTS => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let strategy = util::object_mut(spec.entry("strategy").or_insert_with(|| json!({})));
            set_default(strategy, "type", json!("RollingUpdate"));
            if strategy.get("type") == Some(&json!("RollingUpdate")) {
                let ru =
                    util::object_mut(strategy.entry("rollingUpdate").or_insert_with(|| json!({})));
                set_default(ru, "maxUnavailable", json!("25%"));
                set_default(ru, "maxSurge", json!("25%"));
            }
            if let Some(template) = spec.get_mut("template") {
                default_pod_spec(obj_mut(template, "spec"));
            }
        }
        PODS => {
            let spec = obj_mut(obj, "spec");
            default_pod_spec(spec);
            set_default(spec, "serviceAccountName", json!("default"));
            set_default(spec, "serviceAccount", json!("default"));
            set_default(spec, "priority", json!(0));
        }
        SERVICES => {
            let spec = obj_mut(obj, "spec");
            set_default(spec, "type", json!("ClusterIP"));
            set_default(spec, "sessionAffinity", json!("None"));
            set_default(spec, "internalTrafficPolicy", json!("Cluster"));
            for port in spec
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let p = util::object_mut(port);
                set_default(p, "protocol", json!("TCP"));
                if let Some(n) = p.get("port").cloned() {
                    set_default(p, "targetPort", n);
                }
            }
        }
        SECRETS => {
            set_default(util::object_mut(obj), "type", json!("Opaque"));
        }
        NETWORKPOLICIES => {
            let spec = obj_mut(obj, "spec");
            if spec.get("policyTypes").is_none_or(Value::is_null) {
                let mut types = vec![json!("Ingress")];
                if spec.get("egress").is_some_and(|e| !e.is_null()) {
                    types.push(json!("Egress"));
                }
                spec.insert("policyTypes".into(), Value::Array(types));
            }
            for direction in ["ingress", "egress"] {
                for rule in spec
                    .get_mut(direction)
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    for port in rule
                        .get_mut("ports")
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        set_default(util::object_mut(port), "protocol", json!("TCP"));
                    }
                }
            }
        }
        NAMESPACES => {
            let name = crate::store::name_of(obj).to_owned();
            let labels = util::object_mut(
                crate::store::metadata_mut(obj)
                    .entry("labels")
                    .or_insert_with(|| json!({})),
            );
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            let spec = obj_mut(obj, "spec");
            set_default(spec, "finalizers", json!(["kubernetes"]));
            let status = obj_mut(obj, "status");
            set_default(status, "phase", json!("Active"));
        }
        _ => {}
    }
}

fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let c = util::object_mut(c);
            set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
            set_default(c, "terminationMessagePolicy", json!("File"));
            set_default(c, "resources", json!({}));
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            let policy = if image_is_latest(image) {
                "Always"
            } else {
                "IfNotPresent"
            };
            set_default(c, "imagePullPolicy", json!(policy));
            for port in c
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                set_default(util::object_mut(port), "protocol", json!("TCP"));
            }
            for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                if let Some(p) = c.get_mut(probe) {
                    let p = util::object_mut(p);
                    set_default(p, "timeoutSeconds", json!(1));
                    set_default(p, "periodSeconds", json!(10));
                    set_default(p, "successThreshold", json!(1));
                    set_default(p, "failureThreshold", json!(3));
                    if let Some(h) = p.get_mut("httpGet") {
                        set_default(util::object_mut(h), "scheme", json!("HTTP"));
                    }
                }
            }
            for env in c
                .get_mut("env")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(f) = env.pointer_mut("/valueFrom/fieldRef") {
                    set_default(util::object_mut(f), "apiVersion", json!("v1"));
                }
            }
        }
    }
}

/// No tag and no digest, or the tag `latest`: pulled always.
fn image_is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// What a new object gets besides defaults.
pub(crate) fn prepare_create(res: ResId, obj: &mut Value) {
    match res {
        PODS => {
            let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
            util::object_mut(obj).insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": qos}),
            );
        }
        SERVICES => {
            let spec = obj_mut(obj, "spec");
            if spec
                .get("clusterIP")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
                && spec.get("type").and_then(Value::as_str) != Some("ExternalName")
            {
                let r = util::random();
                let ip = format!("10.96.{}.{}", (r >> 8) % 256, (r % 254) + 1);
                spec.insert("clusterIP".into(), json!(ip));
            }
            if let Some(ip) = spec.get("clusterIP").cloned() {
                set_default(spec, "clusterIPs", json!([ip]));
            }
            set_default(spec, "ipFamilies", json!(["IPv4"]));
            set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
            set_default(util::object_mut(obj), "status", json!({"loadBalancer": {}}));
        }
        SECRETS => fold_string_data(obj),
        _ => {}
    }
}

/// What a changed object keeps of the old one besides what the caller carries.
pub(crate) fn prepare_update(res: ResId, old: &Value, new: &mut Value) {
    match res {
        SERVICES => {
            let spec = obj_mut(new, "spec");
            for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                if spec.get(k).is_none()
                    && let Some(v) = old.pointer(&format!("/spec/{k}"))
                {
                    spec.insert(k.into(), v.clone());
                }
            }
        }
        SECRETS => fold_string_data(new),
        _ => {}
    }
}

/// A Secret's `stringData` goes into `data`, base64-encoded, and is not stored.
fn fold_string_data(obj: &mut Value) {
    let Some(string_data) = util::object_mut(obj).remove("stringData") else {
        return;
    };
    let data = obj_mut(obj, "data");
    for (k, v) in string_data.as_object().into_iter().flatten() {
        let text = v.as_str().unwrap_or("");
        data.insert(
            k.clone(),
            json!(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
}

/// The pod's QoS class from its containers' requests and limits.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = spec
        .get("containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        let full = limits.is_some_and(|l| l.contains_key("cpu") && l.contains_key("memory"));
        let equal = match (requests, limits) {
            (Some(r), Some(l)) => r.iter().all(|(k, v)| l.get(k) == Some(v)),
            (None, Some(_)) => true,
            _ => false,
        };
        if !(full && equal) {
            guaranteed = false;
        }
    }
    if guaranteed {
        "Guaranteed"
    } else if any {
        "Burstable"
    } else {
        "BestEffort"
    }
}

/// Checks an object (and, for an update, what may not change since `old`).
pub(crate) fn validate(res: ResId, old: Option<&Value>, obj: &Value) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    let name = crate::store::name_of(obj);
    let name_check = match res {
        NAMESPACES => dns_label(name),
        SERVICES => dns1035_label(name),
        EVENTS => None,
        _ => dns_subdomain(name),
    };
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if let Some(why) = name_check {
        causes.push(Cause::invalid("metadata.name", &json!(name), &why));
    }
    check_labels(
        obj.pointer("/metadata/labels"),
        "metadata.labels",
        &mut causes,
    );
    check_annotations(obj.pointer("/metadata/annotations"), &mut causes);
    match res {
        DEPLOYMENTS => validate_deployment(old, obj, &mut causes),
        PODS => {
            validate_pod_spec(obj.get("spec"), "spec", &mut causes);
            if let Some(old) = old {
                validate_pod_update(old, obj, &mut causes);
            }
        }
        SERVICES => validate_service(old, obj, &mut causes),
        SECRETS | CONFIGMAPS => validate_data(res, obj, &mut causes),
        ENDPOINTSLICES if obj.get("addressType").is_none() => {
            causes.push(Cause::required("addressType", ""));
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

fn validate_deployment(old: Option<&Value>, obj: &Value, causes: &mut Vec<Cause>) {
    let selector = obj.pointer("/spec/selector");
    match selector {
        None => causes.push(Cause::required("spec.selector", "")),
        Some(sel) => {
            let parsed = LabelSelector::from_object(sel);
            if parsed.is_empty() {
                causes.push(Cause::invalid(
                    "spec.selector",
                    sel,
                    "empty selector is invalid for deployment",
                ));
            }
            if let Some(labels) = sel.get("matchLabels") {
                check_labels(Some(labels), "spec.selector.matchLabels", causes);
            }
            let template = obj.pointer("/spec/template").unwrap_or(&Value::Null);
            if !parsed.is_empty() && !parsed.matches(template) {
                causes.push(Cause::invalid(
                    "spec.template.metadata.labels",
                    template.pointer("/metadata/labels").unwrap_or(&Value::Null),
                    "`selector` does not match template `labels`",
                ));
            }
            if let Some(old_sel) = old.and_then(|o| o.pointer("/spec/selector"))
                && old_sel != sel
            {
                causes.push(Cause::invalid("spec.selector", sel, "field is immutable"));
            }
        }
    }
    check_labels(
        obj.pointer("/spec/template/metadata/labels"),
        "spec.template.metadata.labels",
        causes,
    );
    if let Some(r) = obj.pointer("/spec/replicas").and_then(Value::as_i64)
        && r < 0
    {
        causes.push(Cause::invalid(
            "spec.replicas",
            &json!(r),
            "must be greater than or equal to 0",
        ));
    }
    if obj.pointer("/spec/strategy/type") == Some(&json!("Recreate"))
        && obj.pointer("/spec/strategy/rollingUpdate").is_some()
    {
        causes.push(Cause::forbidden(
            "spec.strategy.rollingUpdate",
            "may not be specified when strategy `type` is 'Recreate'",
        ));
    }
    match obj.pointer("/spec/template") {
        None => causes.push(Cause::required("spec.template", "")),
        Some(t) => validate_pod_spec(t.get("spec"), "spec.template.spec", causes),
    }
}

fn validate_pod_spec(spec: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let Some(containers) = containers.filter(|c| !c.is_empty()) else {
        causes.push(Cause::required(&format!("{at}.containers"), ""));
        return;
    };
    let mut names = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        let here = format!("{at}.containers[{i}]");
        match c.get("name").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required(&format!("{here}.name"), "")),
            Some(n) => {
                if let Some(why) = dns_label(n) {
                    causes.push(Cause::invalid(&format!("{here}.name"), &json!(n), &why));
                }
                if names.contains(&n) {
                    causes.push(Cause::duplicate(&format!("{here}.name"), &json!(n)));
                }
                names.push(n);
            }
        }
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(|i| i.trim().is_empty())
        {
            causes.push(Cause::required(&format!("{here}.image"), ""));
        }
        let mut port_names = Vec::new();
        for (j, p) in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let field = format!("{here}.ports[{j}]");
            match p.get("containerPort").and_then(Value::as_i64) {
                Some(n) if (1..=65535).contains(&n) => {}
                Some(n) => causes.push(Cause::invalid(
                    &format!("{field}.containerPort"),
                    &json!(n),
                    "must be between 1 and 65535, inclusive",
                )),
                None => causes.push(Cause::required(&format!("{field}.containerPort"), "")),
            }
            if let Some(n) = p.get("name").and_then(Value::as_str) {
                if let Some(why) = port_name(n) {
                    causes.push(Cause::invalid(&format!("{field}.name"), &json!(n), &why));
                }
                if port_names.contains(&n) {
                    causes.push(Cause::duplicate(&format!("{field}.name"), &json!(n)));
                }
                port_names.push(n);
            }
        }
        for (j, e) in c
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if e.get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push(Cause::required(&format!("{here}.env[{j}].name"), ""));
            }
        }
    }
}

/// A pod's spec may change only in images, `activeDeadlineSeconds`, tolerations and the
/// grace period (and its node, which binding sets).
fn validate_pod_update(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    let neutral = |pod: &Value| {
        let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        for list in ["containers", "initContainers"] {
            for c in spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(c) = c.as_object_mut() {
                    c.remove("image");
                }
            }
        }
        if let Some(s) = spec.as_object_mut() {
            for k in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "nodeName",
            ] {
                s.remove(k);
            }
        }
        spec
    };
    if neutral(old) != neutral(new) {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

fn validate_service(old: Option<&Value>, obj: &Value, causes: &mut Vec<Cause>) {
    let kind = obj
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let headless = obj.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ports: Vec<&Value> = obj
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    if ports.is_empty() && kind != "ExternalName" && !headless {
        causes.push(Cause::required("spec.ports", ""));
    }
    let mut names = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let field = format!("spec.ports[{i}]");
        match p.get("port").and_then(Value::as_i64) {
            Some(n) if (1..=65535).contains(&n) => {}
            Some(n) => causes.push(Cause::invalid(
                &format!("{field}.port"),
                &json!(n),
                "must be between 1 and 65535, inclusive",
            )),
            None => causes.push(Cause::required(&format!("{field}.port"), "")),
        }
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(&format!("{field}.name"), ""));
        } else if !name.is_empty() {
            if let Some(why) = dns_label(name) {
                causes.push(Cause::invalid(&format!("{field}.name"), &json!(name), &why));
            }
            if names.contains(&name) {
                causes.push(Cause::duplicate(&format!("{field}.name"), &json!(name)));
            }
            names.push(name);
        }
        if let Some(Value::String(t)) = p.get("targetPort")
            && let Some(why) = port_name(t)
        {
            causes.push(Cause::invalid(
                &format!("{field}.targetPort"),
                &json!(t),
                &why,
            ));
        }
    }
    if let Some(old_ip) = old.and_then(|o| o.pointer("/spec/clusterIP"))
        && let Some(new_ip) = obj.pointer("/spec/clusterIP")
        && old_ip != new_ip
    {
        causes.push(Cause::invalid(
            "spec.clusterIPs[0]",
            new_ip,
            "may not change once set",
        ));
    }
    if let Some(sel) = obj.pointer("/spec/selector") {
        check_labels(Some(sel), "spec.selector", causes);
    }
}

fn validate_data(res: ResId, obj: &Value, causes: &mut Vec<Cause>) {
    for (k, v) in obj
        .get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if !valid_config_key(k) {
            causes.push(Cause::invalid(
                &format!("data[{k}]"),
                &json!(k),
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            ));
        }
        if res == SECRETS {
            let ok = v
                .as_str()
                .is_some_and(|s| base64::engine::general_purpose::STANDARD.decode(s).is_ok());
            if !ok {
                causes.push(Cause::invalid(
                    &format!("data[{k}]"),
                    v,
                    "a Secret's data must be base64-encoded",
                ));
            }
        }
    }
}

fn valid_config_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_labels(labels: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    for (k, v) in labels.and_then(Value::as_object).into_iter().flatten() {
        if let Some(why) = qualified_name(k) {
            causes.push(Cause::invalid(at, &json!(k), &why));
        }
        match v.as_str() {
            Some(s) => {
                if let Some(why) = label_value(s) {
                    causes.push(Cause::invalid(at, &json!(s), &why));
                }
            }
            None => causes.push(Cause::invalid(at, v, "a label value must be a string")),
        }
    }
}

fn check_annotations(annotations: Option<&Value>, causes: &mut Vec<Cause>) {
    for (k, v) in annotations.and_then(Value::as_object).into_iter().flatten() {
        if let Some(why) = qualified_name(k) {
            causes.push(Cause::invalid("metadata.annotations", &json!(k), &why));
        }
        if !v.is_string() {
            causes.push(Cause::invalid(
                "metadata.annotations",
                v,
                "an annotation value must be a string",
            ));
        }
    }
}

fn alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: at most 63 lower-case alphanumerics or '-', alphanumeric at both ends.
fn dns_label(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum);
    (!ok).then(|| "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_owned())
}

/// RFC 1035 label: as RFC 1123, starting with a letter.
fn dns1035_label(s: &str) -> Option<String> {
    let ok = dns_label(s).is_none() && s.starts_with(|c: char| c.is_ascii_lowercase());
    (!ok).then(|| "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_owned())
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
fn dns_subdomain(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(|c| alnum(c) || c == '-')
                && part.starts_with(alnum)
                && part.ends_with(alnum)
        });
    (!ok).then(|| "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned())
}

fn name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A label or annotation key: an optional DNS subdomain prefix and '/', then a name.
fn qualified_name(k: &str) -> Option<String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let ok = name_part(name) && prefix.is_none_or(|p| dns_subdomain(p).is_none());
    (!ok).then(|| "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_owned())
}

/// A label value: empty, or a name part of at most 63 characters.
fn label_value(v: &str) -> Option<String> {
    if v.len() > 63 {
        return Some("must be no more than 63 characters".to_owned());
    }
    (!(v.is_empty() || name_part(v))).then(|| "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned())
}

/// An IANA service name (a named port): at most 15 lower-case alphanumerics or '-', with a
/// letter, no '--', not at either end.
fn port_name(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.chars().any(|c| c.is_ascii_lowercase())
        && !s.contains("--")
        && !s.starts_with('-')
        && !s.ends_with('-');
    (!ok).then(|| "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), at most 15 characters, at least one letter, and no '--' or hyphen at either end".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]}]}
                }
            }
        })
    }

    #[test]
    fn defaults() {
        let mut d = deployment();
        default(DEPLOYMENTS, &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert!(validate(DEPLOYMENTS, None, &d).is_ok());
    }

    #[test]
    fn selector_rules() {
        let mut d = deployment();
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        let causes = validate(DEPLOYMENTS, None, &d).unwrap_err();
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
        let old = deployment();
        let mut new = deployment();
        new["spec"]["selector"]["matchLabels"]["tier"] = json!("x");
        new["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
        let causes = validate(DEPLOYMENTS, Some(&old), &new).unwrap_err();
        assert!(causes[0].message.ends_with("field is immutable"));
    }

    #[test]
    fn names_and_labels() {
        assert!(dns_label("web-1").is_none());
        assert!(dns_label("Web").is_some());
        assert!(dns1035_label("1web").is_some());
        assert!(dns_subdomain("a.b-c").is_none());
        assert!(qualified_name("runway.dev/revision").is_none());
        assert!(qualified_name("a/b/c").is_some());
        assert!(label_value(&"x".repeat(64)).is_some());
        assert!(label_value("").is_none());
        assert!(port_name("http").is_none());
        assert!(port_name("8080").is_some());
        assert!(image_is_latest("nginx"));
        assert!(!image_is_latest("registry:5000/nginx:1.2"));
        assert!(image_is_latest("registry:5000/nginx"));
    }
}
