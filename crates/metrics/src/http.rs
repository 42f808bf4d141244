//! The exporter: an HTTP server (axum) on a port of its own in every process that exports,
//! answering `GET /metrics` with the registry in the Prometheus text format and `GET /top`
//! with the busiest files and clients as JSON. A role may add routes of its own (the metadata
//! role serves the dashboard on the same port).

use axum::extract::Query;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use std::net::SocketAddr;

/// Errors starting the exporter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error("cannot listen on {addr} (--metrics-listen): {source}")]
    Bind { addr: String, source: std::io::Error },
}

/// Rows of `/top` unless `?n=` asks for another number.
pub const TOP_ROWS_DEFAULT: usize = 50;
/// Most rows `/top` answers.
pub const TOP_ROWS_MAX: usize = 1000;

/// A running exporter; dropping it stops serving.
pub struct Exporter {
    /// The address it is bound to (the port chosen when 0 was asked for).
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Exporter {
    /// Keeps serving after this handle is gone (roles export for as long as they run).
    pub fn detach(self) -> SocketAddr {
        let addr = self.addr;
        std::mem::forget(self);
        addr
    }
}

#[derive(Deserialize)]
struct TopQuery {
    n: Option<usize>,
}

async fn metrics_text() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, prometheus_client::encoding::prometheus_text::CONTENT_TYPE)], crate::encode_text())
}

async fn top(Query(q): Query<TopQuery>) -> impl IntoResponse {
    axum::Json(crate::top::report(q.n.unwrap_or(TOP_ROWS_DEFAULT).min(TOP_ROWS_MAX)))
}

/// The exporter's own routes.
pub fn routes() -> Router {
    Router::new().route("/metrics", get(metrics_text)).route("/top", get(top))
}

/// Binds `listen` ("HOST:PORT"), turns recording on, and serves the exporter's routes and
/// `extra` (if any) there.
pub async fn serve(listen: &str, extra: Option<Router>) -> Result<Exporter, ExportError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ExportError::Bind { addr: listen.to_string(), source })?;
    serve_listener(listener, listen, extra)
}

/// Binds `listen` now, without a runtime: a role binds its exporter's port before it says it
/// listens (so that a taken port fails its start), and serves it later with [`serve_on`].
pub fn bind(listen: &str) -> Result<std::net::TcpListener, ExportError> {
    let bind = |source| ExportError::Bind { addr: listen.to_string(), source };
    let listener = std::net::TcpListener::bind(listen).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    Ok(listener)
}

/// [`serve`] on a listener bound by [`bind`].
pub fn serve_on(listener: std::net::TcpListener, extra: Option<Router>) -> Result<Exporter, ExportError> {
    let name = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|source| ExportError::Bind { addr: name.clone(), source })?;
    serve_listener(listener, &name, extra)
}

fn serve_listener(
    listener: tokio::net::TcpListener,
    listen: &str,
    extra: Option<Router>,
) -> Result<Exporter, ExportError> {
    let addr = listener.local_addr().map_err(|source| ExportError::Bind { addr: listen.to_string(), source })?;
    crate::enable();
    let mut app = routes();
    if let Some(extra) = extra {
        app = app.merge(extra);
    }
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the metrics exporter stopped: {e}");
        }
    });
    tracing::info!("metrics exported at http://{addr}/metrics");
    Ok(Exporter { addr, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn metrics_and_top_are_served_and_a_taken_port_is_named() {
        let exporter = serve("127.0.0.1:0", None).await.expect("serves");
        crate::top::client("http-test", 1, 2);
        let addr = exporter.addr.to_string();
        let text = crate::scrape::get(&addr, "/metrics").await.expect("GET /metrics");
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"), "{text}");
        let top = crate::scrape::get(&addr, "/top?n=5").await.expect("GET /top");
        let report: crate::top::TopReport = serde_json::from_str(&top).expect("JSON");
        assert!(report.clients.len() <= 5);
        let e = serve(&addr, None).await.err().expect("the port is taken");
        let text = e.to_string();
        assert!(text.contains(&addr) && text.contains("in use"), "{text}");
        let missing = crate::scrape::get(&addr, "/nothing").await.err().expect("404");
        assert!(missing.to_string().contains("404"), "{missing}");
    }
}
