//! A client of a wrapper's API, for the `deployer` and the tests: the generated
//! [`ProcessWrapperClient`] over a TCP or unix socket [`Channel`].

use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::address::ListenAddress;
use crate::proto::process_wrapper_client::ProcessWrapperClient;

/// Connects to the wrapper at `address`, giving up on one attempt after `connect_timeout`.
/// Retries are the caller's: upstream's client retries with a backoff until its own deadline.
pub async fn connect(
    address: &ListenAddress,
    connect_timeout: Duration,
) -> Result<ProcessWrapperClient<Channel>, tonic::transport::Error> {
    let channel = match address {
        ListenAddress::Tcp { host, port } => {
            Endpoint::from_shared(format!("http://{host}:{port}"))?
                .connect_timeout(connect_timeout)
                .connect()
                .await?
        }
        ListenAddress::Unix(path) => {
            let path = path.clone();
            // The URI is not used to connect; it names the `:authority`, as gRPC does for unix
            // sockets.
            Endpoint::from_static("http://localhost")
                .connect_timeout(connect_timeout)
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { UnixStream::connect(path).await.map(TokioIo::new) }
                }))
                .await?
        }
    };
    Ok(ProcessWrapperClient::new(channel))
}
