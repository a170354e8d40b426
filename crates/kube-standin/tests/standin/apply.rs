//! Writes: server-side apply and field ownership, create, replace, merge patch, errors.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::{bounded, deployment, start};

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_tracks_owners_conflicts_and_removals() {
    bounded(async {
        let (api, client) = start().await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let mut body = deployment("web", "r1", 2);
        body["metadata"]["annotations"] = json!({"runway.dev/owner": "team-a"});

        // Create by apply.
        let created = deployments
            .patch("web", &PatchParams::apply("runway"), &Patch::Apply(&body))
            .await
            .unwrap();
        let managed = created.metadata.managed_fields.clone().unwrap();
        assert_eq!(managed.len(), 1);
        assert_eq!(managed[0].manager.as_deref(), Some("runway"));
        assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
        assert_eq!(managed[0].fields_type.as_deref(), Some("FieldsV1"));
        let fields = serde_json::to_value(managed[0].fields_v1.as_ref().unwrap()).unwrap();
        assert!(
            fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"]
                ["f:image"]
                .is_object(),
            "{fields:#}"
        );
        assert_eq!(created.metadata.generation, Some(1));
        assert!(created.metadata.uid.is_some());
        // Defaults the real server writes.
        let spec = created.spec.clone().unwrap();
        assert_eq!(spec.progress_deadline_seconds, Some(600));
        let container = &spec.template.spec.as_ref().unwrap().containers[0];
        assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            container.ports.as_ref().unwrap()[0].protocol.as_deref(),
            Some("TCP")
        );

        // Another manager setting the same value shares it; a different one conflicts.
        let other = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 5},
        });
        let err = deployments
            .patch("web", &PatchParams::apply("autoscaler"), &Patch::Apply(&other))
            .await
            .unwrap_err();
        let status = api_error(err);
        assert_eq!(status.code, 409);
        assert_eq!(status.reason, "Conflict");
        assert_eq!(
            status.message,
            "Apply failed with 1 conflict: conflict with \"runway\": .spec.replicas"
        );

        // Forced, it takes the field over.
        let forced = deployments
            .patch(
                "web",
                &PatchParams::apply("autoscaler").force(),
                &Patch::Apply(&other),
            )
            .await
            .unwrap();
        assert_eq!(forced.spec.as_ref().unwrap().replicas, Some(5));
        assert_eq!(forced.metadata.generation, Some(2));
        let runway_fields = forced
            .metadata
            .managed_fields
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.manager.as_deref() == Some("runway"))
            .map(|m| serde_json::to_value(m.fields_v1.as_ref().unwrap()).unwrap())
            .unwrap();
        assert!(runway_fields["f:spec"].get("f:replicas").is_none());

        // runway now applies without the annotation and without replicas: the annotation
        // (its alone) goes, replicas (the autoscaler's now) stays.
        let mut less = deployment("web", "r1", 2);
        less["spec"].as_object_mut().unwrap().remove("replicas");
        let after = deployments
            .patch("web", &PatchParams::apply("runway"), &Patch::Apply(&less))
            .await
            .unwrap();
        assert!(
            after
                .metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key("runway.dev/owner")),
            "{:?}",
            after.metadata.annotations
        );
        assert_eq!(after.spec.as_ref().unwrap().replicas, Some(5));

        // An update (not an apply) takes ownership of what it changes.
        deployments
            .patch(
                "web",
                &PatchParams {
                    field_manager: Some("kubectl-edit".into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({"spec": {"replicas": 7}})),
            )
            .await
            .unwrap();
        let err = deployments
            .patch("web", &PatchParams::apply("autoscaler"), &Patch::Apply(&other))
            .await
            .unwrap_err();
        assert_eq!(
            api_error(err).message,
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1: .spec.replicas"
        );

        let applies: Vec<_> = api
            .requests()
            .into_iter()
            .filter(|r| r.verb == "patch"
                    && r.content_type.as_deref() == Some("application/apply-patch+yaml"))
            .collect();
        assert_eq!(applies.len(), 5);
        assert!(applies.iter().all(|r| r.resource == "deployments" && r.name.as_deref() == Some("web")));
        assert!(applies.iter().any(|r| r.field_manager.as_deref() == Some("autoscaler")
            && r.query_param("force").as_deref() == Some("true")));
        assert_eq!(applies.iter().filter(|r| r.code == 409).count(), 2);
        api.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_status_objects() {
    bounded(async {
        let (api, client) = start().await;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "settings"},
            "data": {"a": "1"},
        }))
        .unwrap();
        let created = maps.create(&PostParams::default(), &cm).await.unwrap();

        // An apply that changes nothing takes no resource version.
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "applied"}, "data": {"k": "v"}});
        let first = maps
            .patch(
                "applied",
                &PatchParams::apply("runway"),
                &Patch::Apply(&applied),
            )
            .await
            .unwrap();
        let again = maps
            .patch(
                "applied",
                &PatchParams::apply("runway"),
                &Patch::Apply(&applied),
            )
            .await
            .unwrap();
        assert_eq!(
            again.metadata.resource_version,
            first.metadata.resource_version
        );

        let status = api_error(maps.create(&PostParams::default(), &cm).await.unwrap_err());
        assert_eq!(
            (status.code, status.reason.as_str()),
            (409, "AlreadyExists")
        );
        assert_eq!(status.message, "configmaps \"settings\" already exists");

        let status = api_error(maps.get("missing").await.unwrap_err());
        assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
        assert_eq!(status.message, "configmaps \"missing\" not found");
        assert!(maps.get_opt("missing").await.unwrap().is_none());

        // A replace from a stale version.
        let mut changed = created.clone();
        changed.data = Some([("a".to_owned(), "2".to_owned())].into());
        maps.replace("settings", &PostParams::default(), &changed)
            .await
            .unwrap();
        let status = api_error(
            maps.replace("settings", &PostParams::default(), &changed)
                .await
                .unwrap_err(),
        );
        assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));

        // A merge patch, and one in dry run that stores nothing.
        let patched = maps
            .patch(
                "settings",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"b": "3", "a": null}})),
            )
            .await
            .unwrap();
        assert_eq!(
            patched.data.unwrap(),
            [("b".to_owned(), "3".to_owned())].into()
        );
        let dry = maps
            .patch(
                "settings",
                &PatchParams::default().dry_run(),
                &Patch::Merge(json!({"data": {"c": "4"}})),
            )
            .await
            .unwrap();
        assert!(dry.data.unwrap().contains_key("c"));
        assert!(
            !maps
                .get("settings")
                .await
                .unwrap()
                .data
                .unwrap()
                .contains_key("c")
        );

        // Validation: a Deployment whose selector does not match its template.
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let mut bad = crate::deployment("bad", "r1", 1);
        bad["spec"]["selector"]["matchLabels"]["app"] = json!("other");
        let status = api_error(
            deployments
                .patch("bad", &PatchParams::apply("runway"), &Patch::Apply(&bad))
                .await
                .unwrap_err(),
        );
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert!(
            status
                .message
                .contains("`selector` does not match template `labels`"),
            "{}",
            status.message
        );

        // A namespace that does not exist.
        let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
        let status = api_error(
            elsewhere
                .create(&PostParams::default(), &cm)
                .await
                .unwrap_err(),
        );
        assert_eq!(status.message, "namespaces \"nowhere\" not found");

        // Secrets: stringData becomes data.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "token"},
            "stringData": {"value": "hunter2"},
        }))
        .unwrap();
        let stored = secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        assert_eq!(stored.type_.as_deref(), Some("Opaque"));
        assert_eq!(stored.data.unwrap()["value"].0, b"hunter2");
        assert!(stored.string_data.is_none());

        maps.delete("settings", &DeleteParams::default())
            .await
            .unwrap();
        assert!(maps.get_opt("settings").await.unwrap().is_none());
        api.stop().await;
    })
    .await;
}
