//! Lists and watches: resource versions, selectors, 410 after compaction, kube-runtime's
//! watcher re-listing, timeouts.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::{bounded, start};

fn config_map(name: &str, tier: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"tier": tier}},
        "data": {"v": "1"},
    }))
    .unwrap()
}

fn name_of(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_from_a_resource_version() {
    bounded(async {
        let (api, client) = start().await;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();
        maps.create(&pp, &config_map("a", "web")).await.unwrap();
        maps.create(&pp, &config_map("z", "db")).await.unwrap();

        let list = maps
            .list(&ListParams::default().labels("tier in (web,cache)"))
            .await
            .unwrap();
        assert_eq!(list.items.iter().map(name_of).collect::<Vec<_>>(), ["a"]);
        let rv = list.metadata.resource_version.clone().unwrap();
        let by_field = maps
            .list(&ListParams::default().fields("metadata.name=z"))
            .await
            .unwrap();
        assert_eq!(
            by_field.items.iter().map(name_of).collect::<Vec<_>>(),
            ["z"]
        );

        // Changes after the list: replayed by a watch from its version.
        maps.create(&pp, &config_map("b", "web")).await.unwrap();
        maps.patch(
            "a",
            &PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
        // `a` leaves the selection: DELETED to this watch.
        maps.patch(
            "a",
            &PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"tier": "db"}}})),
        )
        .await
        .unwrap();
        maps.delete("b", &Default::default()).await.unwrap();

        let stream = maps
            .watch(&WatchParams::default().labels("tier=web").timeout(5), &rv)
            .await
            .unwrap();
        let events: Vec<(String, String)> = stream
            .take(4)
            .map(|e| match e.unwrap() {
                WatchEvent::Added(o) => ("ADDED".to_owned(), name_of(&o)),
                WatchEvent::Modified(o) => ("MODIFIED".to_owned(), name_of(&o)),
                WatchEvent::Deleted(o) => ("DELETED".to_owned(), name_of(&o)),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
            .await;
        let expected = [
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "a"),
            ("DELETED", "b"),
        ];
        assert_eq!(
            events,
            expected.map(|(k, n)| (k.to_owned(), n.to_owned())).to_vec()
        );

        let watches: Vec<_> = api
            .requests()
            .into_iter()
            .filter(|r| r.verb == "watch")
            .collect();
        assert_eq!(watches.len(), 1);
        assert_eq!(watches[0].query_param("resourceVersion"), Some(rv));
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_times_out_and_an_old_version_is_gone_after_compaction() {
    bounded(async {
        let (api, client) = start().await;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        maps.create(&PostParams::default(), &config_map("a", "web"))
            .await
            .unwrap();
        let rv = maps
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();

        // timeoutSeconds: the stream ends by itself.
        let started = tokio::time::Instant::now();
        let stream = maps
            .watch(&WatchParams::default().timeout(1), &rv)
            .await
            .unwrap();
        let events: Vec<_> = stream.collect().await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            events
                .iter()
                .all(|e| matches!(e, Ok(WatchEvent::Bookmark(_)))),
            "{events:?}"
        );

        api.compact();
        let mut stream = maps
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        match stream.next().await {
            Some(Ok(WatchEvent::Error(status))) => {
                assert_eq!(status.code, 410);
                assert_eq!(status.reason, "Expired");
            }
            other => panic!("expected a 410 ERROR event, got {other:?}"),
        }
        assert!(
            stream.next().await.is_none(),
            "the stream ends after the error"
        );
        api.stop().await;
    })
    .await;
}

/// Receives the watcher's events into `seen` until `want`.
async fn until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: &mut Vec<String>,
    want: &str,
) {
    loop {
        let event = rx.recv().await.unwrap();
        seen.push(event.clone());
        if event == want {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_watcher_relists_after_410() {
    bounded(async {
        let (api, client) = start().await;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        maps.create(&PostParams::default(), &config_map("first", "web"))
            .await
            .unwrap();

        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let watched = maps.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(watched, watcher::Config::default()).boxed();
            while let Some(item) = stream.next().await {
                let summary = match item {
                    Ok(watcher::Event::Init) => "Init".to_owned(),
                    Ok(watcher::Event::InitApply(o)) => format!("InitApply {}", name_of(&o)),
                    Ok(watcher::Event::InitDone) => "InitDone".to_owned(),
                    Ok(watcher::Event::Apply(o)) => format!("Apply {}", name_of(&o)),
                    Ok(watcher::Event::Delete(o)) => format!("Delete {}", name_of(&o)),
                    Err(e) => format!("Error {e}"),
                };
                if tx.send(summary).is_err() {
                    return;
                }
            }
        });
        let mut seen = Vec::new();
        until(&mut rx, &mut seen, "InitDone").await;
        maps.create(&PostParams::default(), &config_map("second", "web"))
            .await
            .unwrap();
        until(&mut rx, &mut seen, "Apply second").await;

        // The server forgets its history and drops every watch: the watcher's version is
        // too old, it gets 410, lists again and carries on.
        api.compact();
        api.end_watches();
        maps.patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
        until(&mut rx, &mut seen, "InitDone").await;
        let after: Vec<&String> = seen.iter().skip_while(|e| *e != "Apply second").collect();
        assert!(
            after
                .iter()
                .any(|e| e.starts_with("Error") && e.ends_with("Expired")),
            "{seen:?}"
        );
        assert!(after.iter().any(|e| *e == "InitApply first"), "{seen:?}");
        assert!(after.iter().any(|e| *e == "InitApply second"), "{seen:?}");

        // And watches on from the new list.
        maps.create(&PostParams::default(), &config_map("third", "web"))
            .await
            .unwrap();
        until(&mut rx, &mut seen, "Apply third").await;
        task.abort();

        let lists = api
            .requests()
            .into_iter()
            .filter(|r| r.verb == "list" && r.resource == "configmaps")
            .count();
        assert_eq!(lists, 2, "listed once, then again after the 410");
        api.stop().await;
    })
    .await;
}
