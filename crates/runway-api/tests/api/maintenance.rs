//! Maintenance through the API: set, read back and ended; a service that is not in it told
//! apart from one that does not exist.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::start;

#[tokio::test]
async fn maintenance_is_read_back_and_a_missing_service_is_another_404() {
    let server = start().await;
    // Its name holds the word: nothing may be told by the message.
    server.onboard("maintenance-bot").await;
    let path = "/v1/services/maintenance-bot/environments/dev/maintenance";

    let absent = server.call("GET", path, Some(&server.admin), None).await;
    assert_eq!(absent.status, StatusCode::NOT_FOUND, "{}", absent.text);
    assert_eq!(absent.code(), "not_in_maintenance", "{}", absent.text);

    let set = server
        .admin(
            "PUT",
            path,
            Some(json!({"message": "back at noon", "allow": ["192.0.2.7"]})),
            200,
        )
        .await;
    assert_eq!(set["message"], "back at noon");
    let read = server.admin("GET", path, None, 200).await;
    assert_eq!(read["allow"], json!(["192.0.2.7/32"]));
    assert_eq!(read["retry_after_seconds"], 300);

    for missing in [
        "/v1/services/nosuch/environments/dev/maintenance",
        "/v1/services/maintenance-bot/environments/nosuch/maintenance",
    ] {
        let answer = server.call("GET", missing, Some(&server.admin), None).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
        assert_eq!(answer.code(), "not_found", "{missing}: {}", answer.text);
    }

    server.admin("DELETE", path, None, 204).await;
    let ended = server.call("GET", path, Some(&server.admin), None).await;
    assert_eq!(ended.code(), "not_in_maintenance", "{}", ended.text);
}
