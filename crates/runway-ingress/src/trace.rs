//! Traces of requests (`--otlp-endpoint`): W3C trace context in and out, and spans exported
//! over OTLP.
//!
//! A request's `traceparent` (and `tracestate`) is read; without one a trace is started here.
//! Each request gets a server span for its whole life (to the response body's end), a span for
//! each wait before an instance took it (`hold`, while its revision had no ready instance: a
//! cold start; `queue`, while every instance was at its concurrency limit), and a client span
//! for the call to the instance (to its response head), whose id is the `traceparent` the
//! instance receives. Spans are made with their own times, after the fact, and handed to the
//! OpenTelemetry SDK's batch processor, whose own thread exports them (protobuf over HTTP); a
//! collector that is down or slow costs the request path nothing but a full queue's drops.
//!
//! Without `--otlp-endpoint` there is no [`Tracing`], and a request pays one branch for it:
//! its trace context headers pass to the instance untouched, as any header does.

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, Method};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span};

/// Where spans go and how many traces are kept.
#[derive(Debug, Clone)]
pub struct TracingOptions {
    /// The collector's OTLP/HTTP base URL (`http://otel-collector:4318`); spans are sent to
    /// its `/v1/traces`.
    pub endpoint: String,
    /// The share of traces started here that are kept (0 to 1); a request whose caller
    /// decided (its `traceparent`'s sampled flag) follows that decision.
    pub sample_ratio: f64,
    /// The `service.name` of the spans.
    pub service_name: String,
}

/// Whether `endpoint` is a collector's base URL: `http://` or `https://` with a host.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let url: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("{endpoint:?} is not a URL: {e}"))?;
    if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
        return Err(format!(
            "{endpoint:?} is not an http:// or https:// URL with a host, e.g. \
             http://127.0.0.1:4318"
        ));
    }
    Ok(())
}

/// The ingress's tracer: present only with `--otlp-endpoint`.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

/// A trace that could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("--otlp-endpoint {endpoint}: {message}")]
pub struct TracingError {
    endpoint: String,
    message: String,
}

impl Tracing {
    /// Sets up the exporter and its batch processor (a thread of its own). Fails on an
    /// endpoint that is no `http://` or `https://` URL, or a ratio outside 0 to 1.
    pub fn new(options: &TracingOptions) -> Result<Self, TracingError> {
        let error = |message: String| TracingError {
            endpoint: options.endpoint.clone(),
            message,
        };
        let base = options.endpoint.trim_end_matches('/');
        let url: http::Uri = base.parse().map_err(|e| error(format!("not a URL: {e}")))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(error(
                "expected an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318"
                    .to_owned(),
            ));
        }
        if !(0.0..=1.0).contains(&options.sample_ratio) {
            return Err(error(format!(
                "sample ratio {} is not between 0 and 1",
                options.sample_ratio
            )));
        }
        // reqwest's rustls takes the process's provider: ring, as the ingress's own TLS.
        let _ = rustls::crypto::ring::default_provider().install_default();
        use opentelemetry_otlp::WithExportConfig as _;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| error(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                options.sample_ratio,
            ))))
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(options.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("runway-ingress");
        Ok(Self {
            provider,
            tracer,
            propagator: TraceContextPropagator::new(),
        })
    }

    /// A request's trace, begun at `start` (its arrival), in its caller's trace when its
    /// headers carry one.
    pub(crate) fn begin(
        &self,
        headers: &HeaderMap,
        method: &Method,
        path: &str,
        client: IpAddr,
        start: Instant,
    ) -> RequestTrace {
        let parent = self
            .propagator
            .extract(&opentelemetry_http::HeaderExtractor(headers));
        let wall = SystemTime::now() - start.elapsed();
        let span = self
            .tracer
            .span_builder(method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_start_time(wall)
            .with_attributes([
                KeyValue::new("http.request.method", method.as_str().to_owned()),
                KeyValue::new("url.path", path.to_owned()),
                KeyValue::new("client.address", client.to_string()),
            ])
            .start_with_context(&self.tracer, &parent);
        RequestTrace {
            tracer: self.tracer.clone(),
            span,
            start,
            wall,
        }
    }

    /// Sends what the batch processor holds, waiting at most `within`: at shutdown.
    pub fn flush(&self, within: Duration) {
        let provider = self.provider.clone();
        let flushed = std::thread::spawn(move || provider.force_flush());
        let deadline = Instant::now() + within;
        while !flushed.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The context headers for the call to the instance, `span`'s.
    fn inject(&self, span: &SpanContext, headers: &mut HeaderMap) {
        let context = Context::new().with_remote_span_context(span.clone());
        self.propagator
            .inject_context(&context, &mut opentelemetry_http::HeaderInjector(headers));
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(2));
    }
}

/// What the request waited for before an instance took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Its revision had no ready instance (scaled to zero, or starting).
    Hold,
    /// Every ready instance was at its concurrency limit.
    Queue,
}

/// One request's spans as they are made.
#[derive(Debug)]
pub(crate) struct RequestTrace {
    tracer: SdkTracer,
    span: Span,
    start: Instant,
    /// The wall-clock time of `start`.
    wall: SystemTime,
}

impl RequestTrace {
    fn at(&self, instant: Instant) -> SystemTime {
        self.wall + instant.saturating_duration_since(self.start)
    }

    fn child(&self, name: &'static str, kind: SpanKind, from: Instant) -> Span {
        let parent = Context::new().with_remote_span_context(self.span.span_context().clone());
        self.tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(self.at(from))
            .start_with_context(&self.tracer, &parent)
    }

    /// The route's names, once known.
    pub(crate) fn routed(&mut self, service: &str, env: &str, revision: &str) {
        self.span.set_attributes([
            KeyValue::new("runway.service", service.to_owned()),
            KeyValue::new("runway.env", env.to_owned()),
            KeyValue::new("runway.revision", revision.to_owned()),
        ]);
    }

    /// A wait from `from` to `to`, as its own span.
    pub(crate) fn waited(&self, wait: Wait, from: Instant, to: Instant, revision: &str) {
        let name = match wait {
            Wait::Hold => "hold",
            Wait::Queue => "queue",
        };
        let mut span = self.child(name, SpanKind::Internal, from);
        span.set_attribute(KeyValue::new("runway.revision", revision.to_owned()));
        span.end_with_timestamp(self.at(to));
    }

    /// The call to the instance at `address`, begun now: its span, whose context the
    /// instance is given in `headers`.
    pub(crate) fn call(
        &self,
        tracing: &Tracing,
        address: std::net::SocketAddr,
        headers: &mut HeaderMap,
    ) -> Span {
        let mut span = self.child("upstream", SpanKind::Client, Instant::now());
        span.set_attributes([
            KeyValue::new("server.address", address.ip().to_string()),
            KeyValue::new("server.port", i64::from(address.port())),
        ]);
        tracing.inject(span.span_context(), headers);
        span
    }

    /// The request ends with `status`, or `error` (the ingress's own answer).
    pub(crate) fn end(mut self, status: u16, error: Option<&str>) {
        self.span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if let Some(error) = error {
            self.span.set_status(Status::error(error.to_owned()));
        } else if status >= 500 {
            self.span.set_status(Status::error(String::new()));
        }
        self.span.end();
    }
}

/// The call to an instance ends: with its response's status, or an error.
pub(crate) fn end_call(mut span: Span, status: Option<u16>) {
    match status {
        Some(status) => {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
            if status >= 500 {
                span.set_status(Status::error(String::new()));
            }
        }
        None => span.set_status(Status::error("no response".to_owned())),
    }
    span.end();
}
