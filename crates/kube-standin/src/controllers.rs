//! The control plane's controllers, level-triggered: each pass reads the whole store and
//! writes only what differs. The namespace controller, the garbage collector, the deployment
//! controller (pods straight from the Deployment, no ReplicaSets) and the EndpointSlice
//! controller; and a kubelet task for every pod that has none.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::api::{self, Propagation};
use crate::kubelet::{self, pod_ready};
use crate::resources::{self, DEPLOYMENTS, ENDPOINTSLICES, NAMESPACES, PODS, SERVICES};
use crate::selector::LabelSelector;
use crate::store::{self, Key, metadata_mut, name_of, namespace_of, uid_of};
use crate::{DELETION_COST_ANNOTATION, NODE_NAME, Shared, World, admission, fields, util};

const TEMPLATE_HASH: &str = "pod-template-hash";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

pub(crate) async fn run(shared: Arc<Shared>) {
    let mut changed = shared.changed.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let new_pods = shared.with(reconcile);
        for (key, uid) in new_pods {
            shared.spawn(kubelet::run(Arc::clone(&shared), key, uid));
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One pass of every controller; returns the pods that need a kubelet task.
fn reconcile(w: &mut World) -> Vec<(Key, String)> {
    namespaces(w);
    garbage_collect(w);
    let deployments: Vec<Value> = w.store.list(DEPLOYMENTS, None).cloned().collect();
    // Each Deployment's pods, found once per pass (not by a scan per Deployment: a pass runs
    // on every write, and a thousand Deployments made that quadratic).
    let mut owned: HashMap<String, Vec<Value>> = HashMap::new();
    for pod in w.store.list(PODS, None) {
        if let Some(owner) = controller_uid(pod) {
            owned.entry(owner.to_owned()).or_default().push(pod.clone());
        }
    }
    for d in &deployments {
        let pods = owned.remove(uid_of(d)).unwrap_or_default();
        deployment(w, d, pods);
    }
    endpoint_slices(w);

    let pods: Vec<(Key, String)> = w
        .store
        .list(PODS, None)
        .map(|p| (Key::of(PODS, p), uid_of(p).to_owned()))
        .collect();
    w.kubelet.retain(|uid| pods.iter().any(|(_, u)| u == uid));
    let new: Vec<(Key, String)> = pods
        .into_iter()
        .filter(|(_, uid)| !w.kubelet.contains(uid))
        .collect();
    for (_, uid) in &new {
        w.kubelet.insert(uid.clone());
    }
    new
}

fn deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect()
}

/// A terminating namespace loses its content, then goes.
fn namespaces(w: &mut World) {
    let terminating: Vec<Value> = w
        .store
        .list(NAMESPACES, None)
        .filter(|n| deleting(n))
        .cloned()
        .collect();
    for ns in terminating {
        let name = name_of(&ns).to_owned();
        let content: Vec<(Key, bool)> = w
            .store
            .all()
            .filter(|(k, _)| k.namespace == name && resources::get(k.res).namespaced)
            .map(|(k, v)| (k.clone(), deleting(v)))
            .collect();
        if content.is_empty() {
            w.store.remove(&Key::new(NAMESPACES, "", &name));
            continue;
        }
        for (key, already) in content {
            if !already {
                api::delete_object(w, &key, Propagation::Background, None);
            }
        }
    }
}

/// Dependents whose owners are all gone are deleted; references to owners that are gone are
/// dropped; an owner deleted in the foreground takes its dependents first.
fn garbage_collect(w: &mut World) {
    let objects: HashMap<String, (Key, Value)> = w
        .store
        .all()
        .map(|(k, v)| (uid_of(v).to_owned(), (k.clone(), v.clone())))
        .collect();
    let foreground = |uid: &str| {
        objects.get(uid).is_some_and(|(_, o)| {
            deleting(o) && finalizers(o).iter().any(|f| f == "foregroundDeletion")
        })
    };
    for (key, obj) in objects.values() {
        let owners: Vec<String> = store::owner_uids(obj).map(str::to_owned).collect();
        if owners.is_empty() || deleting(obj) {
            continue;
        }
        let live: Vec<&String> = owners.iter().filter(|u| objects.contains_key(*u)).collect();
        if live.is_empty() {
            api::delete_object(w, key, Propagation::Background, None);
        } else if live.iter().any(|u| foreground(u)) {
            api::delete_object(w, key, Propagation::Foreground, None);
        } else if live.len() < owners.len() {
            let mut new = obj.clone();
            if let Some(refs) = metadata_mut(&mut new)
                .get_mut("ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| {
                    r.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| objects.contains_key(u))
                });
            }
            w.store.update(key.res, new);
        }
    }
    for (key, obj) in objects.values() {
        if !foreground(uid_of(obj)) || !w.store.dependents(uid_of(obj)).is_empty() {
            continue;
        }
        let Some(mut current) = w.store.get(key).cloned() else {
            continue;
        };
        if let Some(list) = metadata_mut(&mut current)
            .get_mut("finalizers")
            .and_then(Value::as_array_mut)
        {
            list.retain(|f| f != "foregroundDeletion");
        }
        let stored = w.store.update(key.res, current);
        if api::finished_deleting(key.res, &stored) {
            w.store.remove(key);
        }
    }
}

/// maxSurge or maxUnavailable against `desired`: a count, or a percentage rounded up
/// (surge) or down (unavailable).
fn resolve(v: Option<&Value>, desired: usize, round_up: bool) -> usize {
    match v {
        Some(Value::Number(n)) => usize::try_from(n.as_u64().unwrap_or(0)).unwrap_or(0),
        Some(Value::String(s)) => {
            let pct: usize = s.trim_end_matches('%').parse().unwrap_or(25);
            let scaled = desired * pct;
            if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            }
        }
        _ => {
            let scaled = desired * 25;
            if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            }
        }
    }
}

fn controller_uid(pod: &Value) -> Option<&str> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")
        .and_then(Value::as_str)
}

fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn deletion_cost(pod: &Value) -> i64 {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(DELETION_COST_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn restarts(pod: &Value) -> i64 {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .max()
        .unwrap_or(0)
}

/// The ReplicaSet controller's order of pods to delete first (`ActivePodsWithRanks`, all
/// on one node, without logarithmic bucketing).
fn deletion_order(w: &World, a: &Value, b: &Value) -> Ordering {
    let assigned = |p: &Value| {
        p.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
    };
    let phase = |p: &Value| match p.pointer("/status/phase").and_then(Value::as_str) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    };
    let ready_since = |p: &Value| {
        kubelet::condition(p, "Ready")
            .and_then(|c| c.get("lastTransitionTime"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase(a).cmp(&phase(b)))
        .then_with(|| pod_ready(a).cmp(&pod_ready(b)))
        .then_with(|| deletion_cost(a).cmp(&deletion_cost(b)))
        .then_with(|| {
            if pod_ready(a) && pod_ready(b) {
                ready_since(b).cmp(&ready_since(a))
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            w.store
                .created_seq(uid_of(b))
                .cmp(&w.store.created_seq(uid_of(a)))
        })
}

fn delete_pods(w: &mut World, mut pods: Vec<Value>, count: usize) {
    pods.sort_by(|a, b| deletion_order(w, a, b));
    for p in pods.into_iter().take(count) {
        api::delete_object(w, &Key::of(PODS, &p), Propagation::Background, None);
    }
}

fn create_pod(w: &mut World, d: &Value, hash: &str) {
    let ns = namespace_of(d).to_owned();
    let name = name_of(d).to_owned();
    let template = d.pointer("/spec/template").cloned().unwrap_or(Value::Null);
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    labels[TEMPLATE_HASH] = json!(hash);
    let prefix = format!("{name}-{hash}-");
    let pod_name = loop {
        let candidate = format!("{prefix}{}", util::random_suffix(5));
        if w.store.get(&Key::new(PODS, &ns, &candidate)).is_none() {
            break candidate;
        }
    };
    let mut meta = json!({
        "name": pod_name,
        "generateName": prefix,
        "namespace": ns,
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": name,
            "uid": uid_of(d),
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    if let Some(a) = template.pointer("/metadata/annotations") {
        meta["annotations"] = a.clone();
    }
    let mut pod = json!({
        "metadata": meta,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    admission::default(PODS, &mut pod);
    admission::prepare_create(PODS, &mut pod);
    fields::track_update(None, &mut pod, "kube-controller-manager", "v1", None);
    w.store.create(PODS, pod);
}

/// Keeps `spec.replicas` pods of the Deployment's template, rolls them when it changes,
/// and writes its status.
/// One Deployment, with the pods it owns (`owned`, as the pass found them).
fn deployment(w: &mut World, d: &Value, owned: Vec<Value>) {
    if deleting(d) {
        return;
    }
    let hash = util::safe_encode(
        util::stable_hash(d.pointer("/spec/template").unwrap_or(&Value::Null)),
        10,
    );
    let desired = d
        .pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .and_then(|r| usize::try_from(r).ok())
        .unwrap_or(1);
    let (terminating, active): (Vec<Value>, Vec<Value>) = owned.into_iter().partition(deleting);
    let (new, old): (Vec<Value>, Vec<Value>) = active
        .iter()
        .cloned()
        .partition(|p| label(p, TEMPLATE_HASH) == Some(hash.as_str()));

    deployment_status(w, d, &active, &new, desired, &hash);

    let strategy = d.pointer("/spec/strategy/type").and_then(Value::as_str);
    if strategy == Some("Recreate") {
        if !old.is_empty() {
            let n = old.len();
            delete_pods(w, old, n);
            return;
        }
        if terminating
            .iter()
            .any(|p| label(p, TEMPLATE_HASH) != Some(hash.as_str()))
        {
            return;
        }
        scale(w, d, new, desired, &hash);
        return;
    }
    if old.is_empty() {
        scale(w, d, new, desired, &hash);
        return;
    }
    let ru = d.pointer("/spec/strategy/rollingUpdate");
    let surge = resolve(ru.and_then(|r| r.get("maxSurge")), desired, true);
    let mut unavailable = resolve(ru.and_then(|r| r.get("maxUnavailable")), desired, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    let room = (desired + surge).saturating_sub(new.len() + old.len());
    for _ in 0..desired.saturating_sub(new.len()).min(room) {
        create_pod(w, d, &hash);
    }
    if new.len() > desired {
        let extra = new.len() - desired;
        delete_pods(w, new.clone(), extra);
    }
    let min_available = desired.saturating_sub(unavailable);
    let new_ready = new.iter().filter(|p| pod_ready(p)).count();
    let (old_ready, old_unready): (Vec<Value>, Vec<Value>) = old.into_iter().partition(pod_ready);
    let n = old_unready.len();
    delete_pods(w, old_unready, n);
    let removable = (new_ready + old_ready.len()).saturating_sub(min_available);
    delete_pods(w, old_ready, removable);
}

fn scale(w: &mut World, d: &Value, pods: Vec<Value>, desired: usize, hash: &str) {
    if pods.len() < desired {
        for _ in pods.len()..desired {
            create_pod(w, d, hash);
        }
    } else if pods.len() > desired {
        let extra = pods.len() - desired;
        delete_pods(w, pods, extra);
    }
}

fn deployment_status(
    w: &mut World,
    d: &Value,
    active: &[Value],
    new: &[Value],
    desired: usize,
    hash: &str,
) {
    let name = name_of(d);
    let generation = d
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    let ready = active.iter().filter(|p| pod_ready(p)).count();
    let replicas = active.len();
    let updated = new.len();
    let available = ready;
    let unavailable = replicas.max(desired).saturating_sub(available);
    let old = d.get("status").cloned().unwrap_or_else(|| json!({}));
    let count = |k: &str| {
        old.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    };
    let progressed = count("replicas") != replicas
        || count("updatedReplicas") != updated
        || count("readyReplicas") != ready
        || count("availableReplicas") != available
        || old.get("observedGeneration") != Some(&generation);
    let now = util::now();
    let previous = |kind: &str| kubelet::condition(d, kind).cloned();

    let ru = d.pointer("/spec/strategy/rollingUpdate");
    let max_unavailable = if d.pointer("/spec/strategy/type") == Some(&json!("Recreate")) {
        0
    } else {
        resolve(ru.and_then(|r| r.get("maxUnavailable")), desired, false)
    };
    let minimum = available >= desired.saturating_sub(max_unavailable);
    let available_cond = condition(
        previous("Available"),
        "Available",
        minimum,
        if minimum {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        if minimum {
            "Deployment has minimum availability."
        } else {
            "Deployment does not have minimum availability."
        },
        &now,
        false,
    );

    let rs = format!("{name}-{hash}");
    let complete = updated == desired && replicas == desired && available == desired;
    let prev_progressing = previous("Progressing");
    let last_update = prev_progressing
        .as_ref()
        .and_then(|c| c.get("lastUpdateTime"))
        .and_then(Value::as_str)
        .and_then(util::parse_rfc3339);
    let deadline = d
        .pointer("/spec/progressDeadlineSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(600);
    let timed_out = !progressed
        && last_update.is_some_and(|t| {
            SystemTime::now()
                .duration_since(t)
                .is_ok_and(|e| e > Duration::from_secs(deadline))
        });
    let (ok, reason, message) = if complete {
        (
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet {rs:?} has successfully progressed."),
        )
    } else if timed_out {
        (
            false,
            "ProgressDeadlineExceeded",
            format!("ReplicaSet {rs:?} has timed out progressing."),
        )
    } else {
        (
            true,
            "ReplicaSetUpdated",
            format!("ReplicaSet {rs:?} is progressing."),
        )
    };
    let progressing_cond = condition(
        prev_progressing,
        "Progressing",
        ok,
        reason,
        &message,
        &now,
        progressed,
    );

    let mut status = json!({"observedGeneration": generation});
    for (k, v) in [
        ("replicas", replicas),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", unavailable),
    ] {
        if v > 0 {
            status[k] = json!(v);
        }
    }
    status["conditions"] = json!([available_cond, progressing_cond]);
    if d.get("status") != Some(&status) {
        let mut new_d = d.clone();
        new_d["status"] = status;
        w.store.update(DEPLOYMENTS, new_d);
    }
}

/// A Deployment condition, keeping its times unless it changed (or, for `touch`, its
/// `lastUpdateTime` moves on).
fn condition(
    previous: Option<Value>,
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: &str,
    touch: bool,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let prev_time = |k: &str| {
        previous
            .as_ref()
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let same = previous.as_ref().is_some_and(|p| {
        p.get("status") == Some(&json!(status)) && p.get("reason") == Some(&json!(reason))
    });
    let transition = if previous
        .as_ref()
        .is_some_and(|p| p.get("status") == Some(&json!(status)))
    {
        prev_time("lastTransitionTime").unwrap_or_else(|| now.to_owned())
    } else {
        now.to_owned()
    };
    let update = if same && !touch {
        prev_time("lastUpdateTime").unwrap_or_else(|| now.to_owned())
    } else {
        now.to_owned()
    };
    json!({
        "type": kind,
        "status": status,
        "lastUpdateTime": update,
        "lastTransitionTime": transition,
        "reason": reason,
        "message": message,
    })
}

/// One EndpointSlice per Service with a selector, listing the pods it selects.
fn endpoint_slices(w: &mut World) {
    let services: Vec<Value> = w
        .store
        .list(SERVICES, None)
        .filter(|s| !deleting(s))
        .cloned()
        .collect();
    // The pods with an address, by namespace and each of their labels (`key=value`), and the
    // slices by namespace and service, found once per pass rather than scanned per Service.
    let mut by_label: HashMap<(String, String), Vec<Value>> = HashMap::new();
    for pod in w.store.list(PODS, None) {
        if pod.pointer("/status/podIP").is_none() {
            continue;
        }
        let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
        for (key, value) in labels.into_iter().flatten() {
            let label = format!("{key}={}", value.as_str().unwrap_or_default());
            by_label
                .entry((namespace_of(pod).to_owned(), label))
                .or_default()
                .push(pod.clone());
        }
    }
    let mut slices: HashMap<(String, String), Vec<Value>> = HashMap::new();
    for slice in w.store.list(ENDPOINTSLICES, None) {
        if let Some(service) = label(slice, SERVICE_NAME_LABEL) {
            slices
                .entry((namespace_of(slice).to_owned(), service.to_owned()))
                .or_default()
                .push(slice.clone());
        }
    }
    for svc in services {
        let Some(selector) = svc.pointer("/spec/selector").and_then(Value::as_object) else {
            continue;
        };
        if selector.is_empty() {
            continue;
        }
        let first = selector
            .iter()
            .next()
            .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()));
        let selector = LabelSelector::from_map(selector);
        let ns = namespace_of(&svc).to_owned();
        let name = name_of(&svc).to_owned();
        let svc_uid = uid_of(&svc).to_owned();
        let candidates = first
            .and_then(|label| by_label.get(&(ns.clone(), label)))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut pods: Vec<Value> = candidates
            .iter()
            .filter(|p| selector.matches(p))
            .filter(|p| {
                !matches!(
                    p.pointer("/status/phase").and_then(Value::as_str),
                    Some("Succeeded" | "Failed")
                )
            })
            .cloned()
            .collect();
        pods.sort_by(|a, b| name_of(a).cmp(name_of(b)));
        let ports: Vec<Value> = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| slice_port(p, &pods))
            .collect();
        let endpoints: Vec<Value> = pods
            .iter()
            .map(|p| {
                let terminating = deleting(p);
                let ready = pod_ready(p);
                json!({
                    "addresses": [p.pointer("/status/podIP").cloned().unwrap_or(Value::Null)],
                    "conditions": {
                        "ready": ready && !terminating,
                        "serving": ready,
                        "terminating": terminating,
                    },
                    "targetRef": {
                        "kind": "Pod",
                        "namespace": ns,
                        "name": name_of(p),
                        "uid": uid_of(p),
                    },
                    "nodeName": p.pointer("/spec/nodeName").cloned().unwrap_or(json!(NODE_NAME)),
                })
            })
            .collect();
        let mut labels = svc
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        labels[SERVICE_NAME_LABEL] = json!(name);
        labels[MANAGED_BY_LABEL] = json!(MANAGED_BY);
        let existing = slices
            .get(&(ns.clone(), name.clone()))
            .into_iter()
            .flatten()
            .find(|s| store::owner_uids(s).any(|u| u == svc_uid))
            .cloned();
        match existing {
            Some(mut slice) => {
                let before = slice.clone();
                slice["endpoints"] = Value::Array(endpoints);
                slice["ports"] = Value::Array(ports);
                metadata_mut(&mut slice).insert("labels".into(), labels);
                if slice != before {
                    w.store.update(ENDPOINTSLICES, slice);
                }
            }
            None => {
                let slice = json!({
                    "metadata": {
                        "name": format!("{name}-{}", util::random_suffix(5)),
                        "generateName": format!("{name}-"),
                        "namespace": ns,
                        "labels": labels,
                        "ownerReferences": [{
                            "apiVersion": "v1",
                            "kind": "Service",
                            "name": name,
                            "uid": svc_uid,
                            "controller": true,
                            "blockOwnerDeletion": true,
                        }],
                    },
                    "addressType": "IPv4",
                    "endpoints": endpoints,
                    "ports": ports,
                });
                w.store.create(ENDPOINTSLICES, slice);
            }
        }
    }
}

/// A Service port as an EndpointSlice port: its target port, resolved by name against the
/// pods' container ports. None when a named port matches no pod.
fn slice_port(port: &Value, pods: &[Value]) -> Option<Value> {
    let target = port
        .get("targetPort")
        .or_else(|| port.get("port"))
        .cloned()
        .unwrap_or(Value::Null);
    let number = match &target {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => match s.parse::<u64>() {
            Ok(n) => n,
            Err(_) => pods.iter().find_map(|p| {
                p.pointer("/spec/containers")?
                    .as_array()?
                    .iter()
                    .flat_map(|c| {
                        c.get("ports")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                    })
                    .find(|cp| cp.get("name").and_then(Value::as_str) == Some(s.as_str()))?
                    .get("containerPort")?
                    .as_u64()
            })?,
        },
        _ => return None,
    };
    let mut v = json!({
        "name": port.get("name").cloned().unwrap_or(json!("")),
        "port": number,
        "protocol": port.get("protocol").cloned().unwrap_or(json!("TCP")),
    });
    if let Some(app) = port.get("appProtocol") {
        v["appProtocol"] = app.clone();
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashSet;

    fn pod(name: &str, ready: bool, cost: i64) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "n", "annotations": {
                DELETION_COST_ANNOTATION: cost.to_string()
            }},
            "spec": {"nodeName": NODE_NAME},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        })
    }

    #[test]
    fn scale_down_order_is_the_replicaset_controllers() {
        let mut w = World {
            store: store::Store::new(),
            rules: Vec::new(),
            requests: Vec::new(),
            received: Vec::new(),
            logs: crate::logs::Logs::default(),
            kubelet: HashSet::new(),
        };
        let old = w.store.create(PODS, pod("old", true, 0));
        let cheap = w.store.create(PODS, pod("cheap", true, -100));
        let unready = w.store.create(PODS, pod("unready", false, 100));
        let new = w.store.create(PODS, pod("new", true, 0));
        let mut pending = pod("pending", true, 1000);
        pending["spec"] = json!({});
        let pending = w.store.create(PODS, pending);
        let mut pods = [old, cheap, unready, new, pending];
        pods.sort_by(|a, b| deletion_order(&w, a, b));
        let names: Vec<&str> = pods.iter().map(name_of).collect();
        // Unscheduled, then not ready (whatever its cost), then by cost, then newer.
        assert_eq!(names, ["pending", "unready", "cheap", "new", "old"]);
    }

    #[test]
    fn surge_and_unavailable() {
        assert_eq!(resolve(Some(&json!("25%")), 3, true), 1);
        assert_eq!(resolve(Some(&json!("25%")), 3, false), 0);
        assert_eq!(resolve(Some(&json!(2)), 3, false), 2);
        assert_eq!(resolve(None, 8, false), 2);
    }
}
