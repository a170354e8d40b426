//! The gRPC service: `ProcessWrapper`'s three calls answered from the supervisor.
//!
//! As upstream (`helpers/runner_wrapper/api/server/server.go`), every call answers the status
//! and failure reason read after the call took effect, and the shutdown calls succeed once the
//! child has stopped (they change nothing then).

use tonic::{Request, Response};

use crate::callback::ShutdownCallback;
use crate::proto::process_wrapper_server::ProcessWrapper;
use crate::proto::{
    CheckStatusRequest, CheckStatusResponse, InitForcefulShutdownRequest,
    InitForcefulShutdownResponse, InitGracefulShutdownRequest, InitGracefulShutdownResponse,
};
use crate::supervisor::{SupervisorHandle, WrapperState};

#[derive(Debug)]
pub(crate) struct WrapperService {
    supervisor: SupervisorHandle,
}

impl WrapperService {
    pub(crate) fn new(supervisor: SupervisorHandle) -> Self {
        Self { supervisor }
    }
}

fn answer(reply: Result<WrapperState, String>) -> Result<WrapperState, tonic::Status> {
    reply.map_err(tonic::Status::internal)
}

#[tonic::async_trait]
impl ProcessWrapper for WrapperService {
    async fn check_status(
        &self,
        _: Request<CheckStatusRequest>,
    ) -> Result<Response<CheckStatusResponse>, tonic::Status> {
        let state = self.supervisor.state();
        Ok(Response::new(CheckStatusResponse {
            status: state.status.into(),
            failure_reason: state.failure_reason,
        }))
    }

    async fn init_graceful_shutdown(
        &self,
        request: Request<InitGracefulShutdownRequest>,
    ) -> Result<Response<InitGracefulShutdownResponse>, tonic::Status> {
        let callback = ShutdownCallback::from_request(request.into_inner().shutdown_callback);
        let state = answer(self.supervisor.graceful(callback).await)?;
        Ok(Response::new(InitGracefulShutdownResponse {
            status: state.status.into(),
            failure_reason: state.failure_reason,
        }))
    }

    async fn init_forceful_shutdown(
        &self,
        _: Request<InitForcefulShutdownRequest>,
    ) -> Result<Response<InitForcefulShutdownResponse>, tonic::Status> {
        let state = answer(self.supervisor.forceful().await)?;
        Ok(Response::new(InitForcefulShutdownResponse {
            status: state.status.into(),
            failure_reason: state.failure_reason,
        }))
    }
}
